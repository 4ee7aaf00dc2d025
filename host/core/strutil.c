#include "strutil.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t lh_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = malloc((lb + 1) * sizeof *row);
    if (!row)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

const char *lh_nearest(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = lh_edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    size_t limit = strlen(word) / 3;
    if (limit < 2)
        limit = 2;
    return best && best_d <= limit ? best : NULL;
}

char *lh_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *lh_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = NULL;
    int n = vasprintf(&out, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : out;
}

char *lh_join_names(char *buf, size_t cap, const char *const *names, size_t n)
{
    if (!cap)
        return buf;
    size_t used = 0;
    bool truncated = false;
    for (size_t i = 0; i < n && !truncated; i++) {
        const char *parts[2] = {i ? ", " : "", names[i]};
        for (int p = 0; p < 2 && !truncated; p++)
            for (const char *c = parts[p]; *c; c++) {
                if (used + 1 >= cap) {
                    truncated = true;
                    break;
                }
                buf[used++] = *c;
            }
    }
    buf[used] = '\0';
    if (truncated && cap >= 4)
        memcpy(buf + cap - 4, "...", 4);
    return buf;
}
