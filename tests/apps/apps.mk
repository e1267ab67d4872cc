# tests/apps: self-checking CUDA runtime-API programs, each built twice: with the static cudart
# (nvcc's default) and with -cudart shared. Included by tests/tests.mk; the binaries carry no
# sanitizer, so one build serves plain and SAN=1 runs.
#   $(APPS_O)/NAME.static, $(APPS_O)/NAME.shared   for NAME in $(APPS_NAMES)
# Programs exit 0 on success, 1 on failure, 77 when the device has no image for their kernels.

APPS_O := build/apps
APPS_NAMES := vector_add matrix_mul black_scholes binomial_options stream_pipeline symbols \
	param_kinds rdc multithread error_paths managed_vars
# Programs of NVIDIA's libraries (cuFFT, cuBLAS, cuSOLVER, cuSPARSE, cuRAND, NCCL, NVRTC and
# nvJitLink): GPU checks only, the emu executor runs none of their kernels.
APPS_LIB_NAMES := cufft_plans cublas_batched cusolver_dense cusparse_ops curand_gen jit_link
# NCCL ships beside the toolkit, not in it: its programs where its header is there.
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
APPS_LIB_NAMES += nccl_collectives nccl_ranks
endif
# Programs whose part A is too short to be worth an emu run (stdout's A lines), on the GPU only:
# Thrust and CUB, kernels launched from the device, cooperative grids, stream-ordered pools,
# large shared memory and thread block clusters, host memory mapped for kernels.
APPS_GPU_NAMES := graph_update thrust_algorithms device_launch cooperative_grid async_pools shared_clusters \
	zero_copy device_properties texture_objects memcpy_kinds runtime_library
APPS_BIN := $(foreach n,$(APPS_NAMES) $(APPS_LIB_NAMES) $(APPS_GPU_NAMES),$(APPS_O)/$(n).static $(APPS_O)/$(n).shared)
APPS_NVCCFLAGS = -O2 -std=c++17 -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -Xcompiler -Wall
# Per-program extra flags.
APPS_FLAGS_multithread := -Xcompiler -pthread
APPS_FLAGS_rdc := -rdc=true
APPS_FLAGS_device_launch := -rdc=true -lcudadevrt
APPS_FLAGS_cufft_plans := -lcufft
APPS_FLAGS_cublas_batched := -lcublas
APPS_FLAGS_cusolver_dense := -lcusolver
APPS_FLAGS_cusparse_ops := -lcusparse
APPS_FLAGS_curand_gen := -lcurand
APPS_FLAGS_nccl_collectives := -lnccl
APPS_FLAGS_nccl_ranks := -lnccl
APPS_FLAGS_jit_link := -lnvrtc -lnvJitLink
APPS_FLAGS_runtime_library := -lnvrtc

# Each unit is compiled once and linked twice (the cudart is chosen at the link): half the nvcc
# time of building each program whole twice.
APPS_HDR := tests/apps/apps.h tests/apps/apps_nccl.h
$(APPS_O)/obj/%.o: tests/apps/%.cu $(APPS_HDR)
	@mkdir -p $(@D)
	$(NVCC) $(APPS_NVCCFLAGS) $(APPS_FLAGS_$*) -c -o $@ $<
$(APPS_O)/%.static: $(APPS_O)/obj/%.o
	$(NVCC) $(APPS_NVCCFLAGS) $(APPS_FLAGS_$*) -o $@ $<
$(APPS_O)/%.shared: $(APPS_O)/obj/%.o
	$(NVCC) $(APPS_NVCCFLAGS) $(APPS_FLAGS_$*) -cudart shared -o $@ $<

# Relocatable device code: one program from two units, linked on the device side too.
APPS_OBJ_rdc := $(APPS_O)/obj/rdc_main.o $(APPS_O)/obj/rdc_lib.o
$(APPS_OBJ_rdc): $(APPS_O)/obj/%.o: tests/apps/%.cu $(APPS_HDR)
	@mkdir -p $(@D)
	$(NVCC) $(APPS_NVCCFLAGS) $(APPS_FLAGS_rdc) -c -o $@ $<
$(APPS_O)/rdc.static: $(APPS_OBJ_rdc)
	$(NVCC) $(APPS_NVCCFLAGS) $(APPS_FLAGS_rdc) -o $@ $^
$(APPS_O)/rdc.shared: $(APPS_OBJ_rdc)
	$(NVCC) $(APPS_NVCCFLAGS) $(APPS_FLAGS_rdc) -cudart shared -o $@ $^
