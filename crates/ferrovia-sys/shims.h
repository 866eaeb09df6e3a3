/* Extended verbs whose header inlines fall back to an exported function
 * (ibv_create_qp_ex -> ibv_create_qp, ibv_query_device_ex ->
 * ibv_query_device). A wrapper of those inlines would reference the
 * exported symbol, and nothing in ferrovia-sys links libibverbs (it is
 * loaded at run time). These shims keep only the provider path, through
 * the header's own verbs_get_ctx_op, and report EOPNOTSUPP where the
 * inline would fall back: the Rust side decides what to do then. */
#ifndef FERROVIA_SYS_SHIMS_H
#define FERROVIA_SYS_SHIMS_H
#include <infiniband/verbs.h>

/* ibv_create_qp_ex's provider path: NULL with errno EOPNOTSUPP when the
 * provider has no create_qp_ex. */
struct ibv_qp *ferrovia_create_qp_ex(struct ibv_context *context,
				     struct ibv_qp_init_attr_ex *attr);

/* ibv_query_device_ex's provider path: EOPNOTSUPP when the provider has
 * no query_device_ex (or answers EOPNOTSUPP/ENOSYS). */
int ferrovia_query_device_ex(struct ibv_context *context,
			     struct ibv_device_attr_ex *attr);
#endif
