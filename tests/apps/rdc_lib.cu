// Relocatable device code, library side (built with rdc_main.cu and -rdc=true): a __device__
// function and a __device__ variable that rdc_main.cu uses, and a use of a variable defined there.
extern __device__ int rdc_main_factor;  // defined in rdc_main.cu

__device__ int rdc_lib_calls;  // defined here, counted by the kernel in rdc_main.cu

// Uses rdc_main_factor, defined in rdc_main.cu: the link resolves references both ways.
__device__ int rdc_lib_transform(int x, int i) {
    atomicAdd(&rdc_lib_calls, 1);
    return x * rdc_main_factor + i;
}
