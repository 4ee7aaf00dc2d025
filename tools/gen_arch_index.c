/* gen_arch_index: rebuilds an arch_index.tsv from what the plugins in a directory actually
 * register, or checks a committed index against them (the build's drift check).
 *
 *   gen_arch_index PLUGIN_DIR                 print the index to stdout
 *   gen_arch_index PLUGIN_DIR --write FILE    write it atomically (temporary file + rename)
 *   gen_arch_index PLUGIN_DIR --check FILE    exit 11 (index drift) listing every difference
 *
 * The generation and the atomic write are the code behind `llmhost plugin index`
 * (lh_index_generate / lh_index_regenerate in host/loader/index_generate.c): each plugin is
 * loaded in a child process, so a crashing or hanging plugin is reported, not fatal.
 */
#include "index/arch_index.h"
#include "loader/index_generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: gen_arch_index PLUGIN_DIR [--write FILE | --check FILE]\n");
    return LH_E_USAGE;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 4)
        return usage();
    const char *mode = argc == 4 ? argv[2] : NULL;
    if (mode && strcmp(mode, "--write") != 0 && strcmp(mode, "--check") != 0)
        return usage();
    lh_err err = {0};
    if (mode && strcmp(mode, "--write") == 0) {
        if (lh_index_regenerate(argv[1], argv[3], false, 0, NULL, &err) != LH_OK) {
            fprintf(stderr, "gen_arch_index: error [%s]: %s\n", lh_status_name(err.code),
                    err.msg);
            return err.code;
        }
        return 0;
    }
    lh_arch_index generated;
    if (lh_index_generate(argv[1], false, &generated, &err) != LH_OK) {
        fprintf(stderr, "gen_arch_index: error [%s]: %s\n", lh_status_name(err.code), err.msg);
        return err.code;
    }
    int rc = 0;
    if (!mode) {
        rc = lh_arch_index_write(stdout, generated.rows, generated.n_rows) == 0 ? 0 : LH_E_IO;
    } else {
        lh_arch_index committed;
        if (lh_arch_index_load(argv[3], &committed, &err) != LH_OK) {
            fprintf(stderr, "gen_arch_index: error [%s]: %s\n", lh_status_name(err.code),
                    err.msg);
            rc = err.code;
        } else {
            size_t diffs = lh_index_diff(&committed, &generated, stderr);
            if (diffs) {
                fprintf(stderr, "%s disagrees with the plugins in %s (%zu difference%s); "
                        "regenerate it with: gen_arch_index %s --write %s\n",
                        argv[3], argv[1], diffs, diffs == 1 ? "" : "s", argv[1], argv[3]);
                rc = LH_E_INDEX_DRIFT;
            } else {
                printf("%s matches the %zu registrations of the plugins in %s\n", argv[3],
                       generated.n_rows, argv[1]);
            }
            lh_arch_index_free(&committed);
        }
    }
    lh_arch_index_free(&generated);
    return rc;
}
