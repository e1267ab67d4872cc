// Kernels of the texture and surface test (prog_texture): read through texture objects, write
// through a surface object. GPU only: an emu kernel reads memory as the CPU does.

extern "C" __global__ void tex_read(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

extern "C" __global__ void tex_fetch(cudaTextureObject_t t, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tex1Dfetch<float>(t, i);
}

extern "C" __global__ void surf_write(cudaSurfaceObject_t s, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        surf2Dwrite((float)(x * 2 + y * 1000), s, x * (int)sizeof(float), y);
}

extern "C" __global__ void tex_lod(cudaTextureObject_t t, float *out, int w, int h, float level)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        out[y * w + x] = tex2DLod<float>(t, (x + 0.5f) / w, (y + 0.5f) / h, level);
}
