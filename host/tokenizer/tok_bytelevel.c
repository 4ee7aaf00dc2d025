/* GPT-2's bytes_to_unicode: every byte stands for a printable character (U+0021..U+0143), the
 * map the ByteLevel pre-tokenizer applies and the ByteLevel decoder reverses. Built once. */
#include "tokenizer/tokenizer_internal.h"

#include <pthread.h>

static uint32_t byte_to_cp[256];
static int16_t cp_to_byte_map[324];
static pthread_once_t bytelevel_once = PTHREAD_ONCE_INIT;

static void build_bytelevel(void)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            byte_to_cp[b] = (uint32_t)b;
        else
            byte_to_cp[b] = (uint32_t)(256 + n++);
    }
    for (size_t i = 0; i < sizeof cp_to_byte_map / sizeof cp_to_byte_map[0]; i++)
        cp_to_byte_map[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte_map[byte_to_cp[b]] = (int16_t)b;
}

void bytelevel_init(void) { pthread_once(&bytelevel_once, build_bytelevel); }

uint32_t bytelevel_cp(unsigned char b) { return byte_to_cp[b]; }

int bytelevel_byte(uint32_t cp)
{
    return cp < sizeof cp_to_byte_map / sizeof cp_to_byte_map[0] ? cp_to_byte_map[cp] : -1;
}
