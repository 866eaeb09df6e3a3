/* Headers ferrovia-sys binds. bindgen reads this file; the generated C
 * wrappers for static-inline functions #include it too. */
#include <infiniband/verbs.h>
#include "shims.h"
#ifdef FERROVIA_SYS_RDMACM
#include <rdma/rdma_cma.h>
#endif
