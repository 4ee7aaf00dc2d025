/* Internal: the host API table handed to every plugin's init. */
#ifndef LH_API_HOST_API_TABLE_H
#define LH_API_HOST_API_TABLE_H

#include "lh_plugin.h"

/* The one static table; never NULL. */
const lh_host_api *lh_host_api_table(void);

#endif
