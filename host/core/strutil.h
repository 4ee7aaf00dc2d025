/* Internal: small string helpers shared across the host. */
#ifndef LH_CORE_STRUTIL_H
#define LH_CORE_STRUTIL_H

#include <stddef.h>

/* Levenshtein distance (case-insensitive), for did-you-mean suggestions. */
size_t lh_edit_distance(const char *a, const char *b);
/* Of `n` candidates, the nearest to `word` when close enough to be a plausible typo
 * (distance <= max(2, len/3)); NULL otherwise. */
const char *lh_nearest(const char *word, const char *const *candidates, size_t n);
/* Writes names[0..n) joined by ", " into buf (always NUL-terminated); when they do not all
 * fit, the text is cut at the end of buf and ends with "...". Returns buf. */
char *lh_join_names(char *buf, size_t cap, const char *const *names, size_t n);
/* strdup that returns NULL only on allocation failure; NULL in gives NULL out. */
char *lh_strdup(const char *s);
/* malloc'ed printf; NULL on allocation failure. */
char *lh_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
