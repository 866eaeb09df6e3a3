/* Headers ferrovia-ucx binds. */
#include <ucp/api/ucp.h>
