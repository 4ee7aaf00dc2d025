/* A library the CUDA stub of kind 5 links, whose soname (set in meson.build) names a file that
 * does not exist: loading that stub fails as a CUDA library does without cudart or cuBLAS. */
__attribute__((visibility("default"))) int lh_cuda_stub_gone_dep(void);
int lh_cuda_stub_gone_dep(void)
{
    return 5;
}
