/* A one-line terminal progress bar; see progress.h. */
#include "progress.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 20

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

char *lh_progress_format(char *buf, size_t n, const char *label, int64_t done, int64_t total)
{
    if (!n)
        return buf;
    if (done < 0)
        done = 0;
    if (total < 0)
        total = 0;
    if (done > total)
        done = total;
    double frac = total ? (double)done / (double)total : 1.0;
    int filled = (int)(frac * BAR_WIDTH);
    int pct = (int)(frac * 100.0);
    char bar[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double scale = 1.0;
    int u = 0;
    while ((double)total >= scale * 1024.0 && u < 4) {
        scale *= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%s [%s] %3d%% %lld/%lld B", label ? label : "", bar, pct,
                 (long long)done, (long long)total);
    else
        snprintf(buf, n, "%s [%s] %3d%% %.2f/%.2f %s", label ? label : "", bar, pct,
                 (double)done / scale, (double)total / scale, units[u]);
    return buf;
}

static void draw(lh_progress *p)
{
    char line[256];
    lh_progress_format(line, sizeof line, p->label, p->done, p->total);
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->drawn_done = p->done;
    p->last_draw_s = now_s();
}

void lh_progress_begin_to(lh_progress *p, FILE *out, bool enabled, const char *label,
                          int64_t total, double min_interval_s)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->enabled = enabled && out && total > 0;
    p->label = label;
    p->total = total;
    p->drawn_done = -1;
    p->min_interval_s = min_interval_s < 0 ? 0.1 : min_interval_s;
    if (p->enabled)
        draw(p);
}

void lh_progress_begin(lh_progress *p, const char *label, int64_t total)
{
    const char *off = getenv("LLMHOST_NO_PROGRESS");
    bool tty = isatty(STDERR_FILENO) == 1 && !(off && *off);
    lh_progress_begin_to(p, stderr, tty, label, total, -1.0);
}

void lh_progress_add(lh_progress *p, int64_t delta)
{
    p->done += delta;
    if (!p->enabled)
        return;
    if (p->done == p->drawn_done)
        return;
    if (p->done >= p->total || now_s() - p->last_draw_s >= p->min_interval_s)
        draw(p);
}

void lh_progress_end(lh_progress *p)
{
    if (p->enabled) {
        if (p->done != p->drawn_done)
            draw(p);
        fputc('\n', p->out);
        fflush(p->out);
    }
    p->enabled = false;
}
