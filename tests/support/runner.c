#include "runner.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned skipped_count;

void lh_test_mark_skipped(const char *test_name, const char *reason)
{
    skipped_count++;
    printf("\n  SKIPPED %s: %s\n", test_name, reason);
}

int lh_test_main(int argc, char **argv, CU_SuiteInfo *suites)
{
    (void)argc;
    (void)argv;
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: cannot initialize registry\n");
        return 2;
    }
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: cannot register suites: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned run = CU_get_number_of_tests_run();
    unsigned failed = CU_get_number_of_tests_failed();
    unsigned suites_failed = CU_get_number_of_suites_failed();
    unsigned inactive = CU_get_number_of_tests_inactive();
    CU_cleanup_registry();
    /* A suite whose init failed runs none of its tests: count them as failed so they cannot
     * vanish from the total. */
    unsigned skipped = skipped_count;
    unsigned passed = run - failed - (skipped <= run - failed ? skipped : 0);
    printf("\nLH-TEST-SUMMARY passed=%u failed=%u skipped=%u\n", passed,
           failed + suites_failed + inactive, skipped);
    return (failed || suites_failed || inactive) ? 1 : 0;
}

char *lh_test_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/lhtest.XXXXXX", base);
    if (!mkdtemp(tmpl))
        return NULL;
    chmod(tmpl, 0755);
    char *abs = realpath(tmpl, NULL);
    return abs;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void lh_test_rmtree(const char *path)
{
    if (path)
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int lh_test_copy_file(const char *src, const char *dir, const char *name, unsigned mode)
{
    char dst[PATH_MAX];
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    int in = open(src, O_RDONLY);
    if (in < 0)
        return -1;
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) {
            rc = -1;
            break;
        }
    if (n < 0)
        rc = -1;
    close(in);
    close(out);
    if (rc == 0 && chmod(dst, mode) != 0)
        rc = -1;
    return rc;
}

int lh_test_write_file(const char *dir, const char *name, const char *text)
{
    char dst[PATH_MAX];
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *f = fopen(dst, "w");
    if (!f)
        return -1;
    size_t len = strlen(text);
    int rc = fwrite(text, 1, len, f) == len ? 0 : -1;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

const char *lh_test_env(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "test environment variable %s is not set (run through meson test)\n",
                name);
        exit(2);
    }
    return v;
}
