/* Internal: what a JSON value is, for error messages ("must be a string, not an array"). */
#ifndef LH_CORE_JSON_KIND_H
#define LH_CORE_JSON_KIND_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a number", "a boolean" or "null";
 * static. */
const char *lh_json_kind(const json_t *v);

#endif
