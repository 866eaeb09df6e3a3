/* The header ferrovia-pmix binds (pkg-config pmix gives its directory). */
#include <pmix.h>
