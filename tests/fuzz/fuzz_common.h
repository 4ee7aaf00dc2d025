/* Shared by the libFuzzer harnesses (tests/fuzz): each calls the entry point production uses
 * on the fuzzer's bytes, as text or as a file, and frees what it got. A harness never checks
 * results: the sanitizers and libFuzzer (crash, leak, timeout, out of memory) are the oracle. */
#ifndef LH_FUZZ_COMMON_H
#define LH_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* data as a NUL-terminated string (malloc'ed; NULL when out of memory). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s) {
        memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}

/* data as a file that the readers open and map by path: an anonymous memory file named by
 * /proc/self/fd (no disk, nothing left behind). Returns the fd (close it), -1 on failure. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    const int fd = memfd_create("lh-fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < size) {
        const ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* Splits data at its first NUL byte: the part before (as a string) and after it. */
static inline void fuzz_split(const uint8_t *data, size_t size, char **a, const uint8_t **b,
                              size_t *b_size)
{
    const uint8_t *nul = memchr(data, 0, size);
    const size_t n = nul ? (size_t)(nul - data) : size;
    *a = fuzz_text(data, n);
    *b = nul ? nul + 1 : data + size;
    *b_size = nul ? size - n - 1 : 0;
}

#endif
