/* Stand-ins for the CUDA driver (libcuda.so.1) that the probe in kernels/cuda_load.c asks
 * before it maps the CUDA kernels library (LLMHOST_CUDA_DRIVER names one), one module per
 * DRIVER_KIND:
 *   1 no cuInit / cuDeviceGetCount (not a driver)
 *   2 cuInit fails (as with no GPU or a driver too old), with cuGetErrorString
 *   3 a working driver that finds no device */
#if DRIVER_KIND == 1
__attribute__((visibility("default"))) int lh_fake_driver_nothing = 1;
#else
__attribute__((visibility("default"))) int cuInit(unsigned flags);
__attribute__((visibility("default"))) int cuDeviceGetCount(int *count);
__attribute__((visibility("default"))) int cuGetErrorString(int code, const char **text);

int cuInit(unsigned flags)
{
    (void)flags;
    return DRIVER_KIND == 2 ? 100 : 0; /* 100: CUDA_ERROR_NO_DEVICE */
}

int cuDeviceGetCount(int *count)
{
    *count = 0;
    return 0;
}

int cuGetErrorString(int code, const char **text)
{
    *text = code == 100 ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}
#endif
