/* See shims.h. */
#include <errno.h>
#include "shims.h"

struct ibv_qp *ferrovia_create_qp_ex(struct ibv_context *context,
				     struct ibv_qp_init_attr_ex *attr)
{
	struct verbs_context *vctx = verbs_get_ctx_op(context, create_qp_ex);

	if (!vctx) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return vctx->create_qp_ex(context, attr);
}

int ferrovia_query_device_ex(struct ibv_context *context,
			     struct ibv_device_attr_ex *attr)
{
	struct verbs_context *vctx = verbs_get_ctx_op(context, query_device_ex);
	int ret;

	if (!vctx)
		return EOPNOTSUPP;
	ret = vctx->query_device_ex(context, NULL, attr, sizeof(*attr));
	if (ret == ENOSYS)
		return EOPNOTSUPP;
	return ret;
}
