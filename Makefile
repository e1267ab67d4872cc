# vGPU assemblies for Xen: the whole build, in one non-recursive make.
#
#   make            libcuda.so.1 (the frontend), vgpud, vgpu-worker, vgpu-run, vgpuctl under build/
#   make demo       start vgpud and run a CUDA program through a vGPU (GPU if present, else emu)
#   make check      unit and host-mode integration tests, built with ASan+UBSan (no GPU needed),
#                   a bounded run of every fuzzer, then the Xen smoke test
#   make fuzz       the fuzzers for long (tests/fuzz/fuzz.mk)
#   make check-xen  the Xen smoke test alone: Xen 4.17 under QEMU, vgpud in dom0, CUDA in a domU
#   make check-gpu  the integration programs on a real GPU, compared with native runs
#   make bench-gpu  native vs vGPU benchmarks on a real GPU
#   make bench-share how vGPUs share a real GPU under FIFO, Credit and BAND
#   make deps       install the Debian packages the build needs
#   make SAN=1 ...  the same targets built with AddressSanitizer and UndefinedBehaviorSanitizer

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
PYTHON ?= python3
CC ?= gcc
PREFIX ?= /usr/local
SAN ?= 0
# The GPU architecture the GPU tests and benchmarks are built for (sm_90: H100).
GPU_ARCH ?= 90

ifeq ($(SAN),1)
O ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
O ?= build
SANFLAGS :=
endif

DEB_PACKAGES := pkg-config check libsubunit-dev libzstd-dev liblz4-dev libxen-dev clang libclang-rt-14-dev libucx-dev \
	libcurl4-openssl-dev etcd-server etcd-client
PKGS := libzstd liblz4

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# remote/'s libraries, linked by vgpud alone: UCX (libucp) carries the links between the vgpuds of
# different nodes, libcurl speaks to etcd's JSON gateway (cluster state).
REMOTE_LIBS = $(shell pkg-config --libs ucx libcurl 2>/dev/null)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -O2 -g $(WARN) -fPIC -pthread $(SANFLAGS) \
	-Iinclude -Icommon -Isched -Ixen -Iassembly -I$(O)/gen -isystem $(CUDA_HOME)/include $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL := -pthread $(SANFLAGS) $(LDFLAGS)
DEPFLAGS = -MMD -MP

.PHONY: all deps demo check check-unit check-host check-xen check-gpu bench-gpu bench-share bench-remote bench-remote-sweep bench-timeline clean install help
.DEFAULT_GOAL := all

# ------------------------------------------------------------------------------------------ sources
COMMON_SRC := $(sort $(wildcard common/*.c))
FRONTEND_SRC := $(sort $(wildcard frontend/*.c))
BACKEND_SRC := $(sort $(wildcard backend/*.c))
WORKER_SRC := $(sort $(wildcard worker/*.c worker/exec/*.c))
SCHED_SRC := $(sort $(wildcard sched/*.c))
SHM_SRC := $(sort $(wildcard shm/*.c))
XEN_SRC := $(sort $(wildcard xen/*.c))
ASSEMBLY_SRC := $(sort $(wildcard assembly/*.c))
REMOTE_SRC := $(sort $(wildcard remote/*.c))
NVML_SRC := $(sort $(wildcard nvml/*.c))
GEN := $(O)/gen/vgpu_driver_api.h $(O)/gen/vgpu_driver_exports.c $(O)/gen/vgpu_driver_procs.c \
	$(O)/gen/vgpu_driver_trace.c $(O)/gen/vgpu_driver_renames.txt

COMMON_OBJ := $(COMMON_SRC:%.c=$(O)/obj/%.o)
FRONTEND_OBJ := $(FRONTEND_SRC:%.c=$(O)/obj/%.o) $(O)/obj/gen/vgpu_driver_exports.o $(O)/obj/gen/vgpu_driver_procs.o \
	$(O)/obj/gen/vgpu_driver_trace.o
BACKEND_OBJ := $(BACKEND_SRC:%.c=$(O)/obj/%.o)
WORKER_OBJ := $(filter-out $(O)/obj/worker/main.o,$(WORKER_SRC:%.c=$(O)/obj/%.o))
SCHED_OBJ := $(SCHED_SRC:%.c=$(O)/obj/%.o)
SHM_OBJ := $(SHM_SRC:%.c=$(O)/obj/%.o)
XEN_OBJ := $(XEN_SRC:%.c=$(O)/obj/%.o)
ASSEMBLY_OBJ := $(ASSEMBLY_SRC:%.c=$(O)/obj/%.o)
REMOTE_OBJ := $(REMOTE_SRC:%.c=$(O)/obj/%.o)
NVML_OBJ := $(NVML_SRC:%.c=$(O)/obj/%.o)

LIBCOMMON := $(O)/lib/libvgpucommon.a
LIBSCHED := $(O)/lib/libvgpusched.a
LIBSHM := $(O)/lib/libvgpushm.a
LIBXEN := $(O)/lib/libvgpuxen.a
LIBASSEMBLY := $(O)/lib/libvgpuassembly.a
LIBREMOTE := $(O)/lib/libvgpuremote.a
LIBWORKER := $(O)/lib/libvgpuworker.a
FRONTEND := $(O)/lib/libcuda.so.1
NVML := $(O)/lib/libnvidia-ml.so.1
VGPUD := $(O)/bin/vgpud
VGPU_WORKER := $(O)/bin/vgpu-worker
VGPU_RUN := $(O)/bin/vgpu-run
VGPUCTL := $(O)/bin/vgpuctl
SCHED_SIM := $(O)/bin/sched-sim

all: $(FRONTEND) $(NVML) $(VGPUD) $(VGPU_WORKER) $(VGPU_RUN) $(VGPUCTL) $(SCHED_SIM) $(LIBXEN)

help:
	@sed -n '2,13p' Makefile

# ------------------------------------------------------------------------------------------ rules
$(O)/obj/%.o: %.c | $(GEN)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(EXTRA_CFLAGS) $(DEPFLAGS) -c $< -o $@

# The frontend defines the driver's exported names exactly (cuMemAlloc_v2, cuCtxSynchronize_v2,
# ...), so it sees cuda.h the way the driver itself is built: every name declared as itself.
$(O)/obj/frontend/%.o: EXTRA_CFLAGS := -D__CUDA_API_VERSION_INTERNAL

# A worker's code finds its executors' headers; vgpud's finds the memory manager's (shm/).
$(O)/obj/worker/%.o: EXTRA_CFLAGS := -Iworker -Iworker/exec -Ishm
$(O)/obj/backend/%.o: EXTRA_CFLAGS := -Ishm -Iremote

$(O)/obj/gen/%.o: $(O)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -D__CUDA_API_VERSION_INTERNAL $(DEPFLAGS) -c $< -o $@

# The driver API surface (exported names, versioned cuGetProcAddress table, enums) comes from the
# toolkit's headers.
$(GEN) &: frontend/gen_driver_api.py $(CUDA_HOME)/include/cuda.h $(CUDA_HOME)/include/cudaTypedefs.h
	@mkdir -p $(O)/gen
	$(PYTHON) frontend/gen_driver_api.py --cuda-include $(CUDA_HOME)/include --out $(O)/gen

$(LIBCOMMON): $(COMMON_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBSCHED): $(SCHED_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The device memory manager (quotas), in the workers.
$(LIBSHM): $(SHM_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Everything of a worker but its main(): the worker, the unit tests and the fuzzers link it.
$(LIBWORKER): $(WORKER_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBASSEMBLY): $(ASSEMBLY_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Links to the vgpuds of other nodes (UCX), their handshake and messages.
$(LIBREMOTE): $(REMOTE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The Xen transport and xenstore helpers; Xen's libraries are loaded at run time (xen/xenlib.h).
$(LIBXEN): $(XEN_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The frontend is a drop-in libcuda.so.1: unversioned exports like the real one, and internal
# references bound inside the library so that an application's symbols cannot divert them. Its
# objects are linked renamed (gen_driver_api.py's list): an exported function is a wrapper that
# notes its errors in the driver's log, the frontend's own calls go to the implementation.
FRONTEND_LINKED := $(FRONTEND_OBJ:$(O)/obj/%.o=$(O)/obj-linked/%.o)
$(O)/obj-linked/%.o: $(O)/obj/%.o $(O)/gen/vgpu_driver_renames.txt
	@mkdir -p $(@D)
	objcopy --redefine-syms=$(O)/gen/vgpu_driver_renames.txt $< $@
$(FRONTEND): $(FRONTEND_LINKED) $(LIBXEN) $(LIBCOMMON) frontend/exports.map
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -Wl,--no-undefined -Wl,--version-script=frontend/exports.map \
		-o $@ $(FRONTEND_LINKED) $(LIBXEN) $(LIBCOMMON) \
		$(LDFLAGS_ALL) $(PKG_LIBS) -ldl
	ln -sf libcuda.so.1 $(O)/lib/libcuda.so

# The project's NVML, beside the frontend (vgpu-run puts that directory on the library path).
# Every name of NVIDIA's library is exported (nvml/nvml_functions.txt): those not implemented answer
# NVML_ERROR_NOT_SUPPORTED.
$(O)/gen/nvml_exports.c: nvml/gen_nvml_exports.py nvml/nvml_functions.txt
	@mkdir -p $(@D)
	$(PYTHON) nvml/gen_nvml_exports.py --names nvml/nvml_functions.txt --out $@

$(NVML): $(NVML_OBJ) $(O)/obj/gen/nvml_exports.o $(LIBXEN) $(LIBCOMMON) nvml/exports.map
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,-Bsymbolic -Wl,--no-undefined -Wl,--version-script=nvml/exports.map \
		-o $@ $(NVML_OBJ) $(O)/obj/gen/nvml_exports.o $(LIBXEN) $(LIBCOMMON) $(LDFLAGS_ALL) -pthread -ldl
	ln -sf libnvidia-ml.so.1 $(O)/lib/libnvidia-ml.so

# vgpud, the supervisor: it never loads the GPU driver nor runs a tenant's code.
$(VGPUD): $(BACKEND_OBJ) $(LIBREMOTE) $(LIBSHM) $(LIBSCHED) $(LIBASSEMBLY) $(LIBXEN) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(REMOTE_LIBS) -ldl -lm

# The tenant's process: channels, handlers, executors.
$(VGPU_WORKER): $(O)/obj/worker/main.o $(LIBWORKER) $(LIBSHM) $(LIBSCHED) $(LIBXEN) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(PKG_LIBS) -ldl -lm

$(SCHED_SIM): $(O)/obj/tools/sched-sim.o $(LIBSCHED)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) -lm

$(O)/bin/%: $(O)/obj/tools/%.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL)

$(VGPU_RUN): $(O)/obj/tools/vgpu-run.o $(LIBCOMMON)
$(VGPUCTL): $(O)/obj/tools/vgpuctl.o $(LIBCOMMON)

# ------------------------------------------------------------------------------------------ deps
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@test -x $(NVCC) || echo "note: $(NVCC) not found; tests that build CUDA images need the CUDA toolkit"

include tests/tests.mk
include benchmarks/benchmarks.mk
include examples/examples.mk

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/vgpu
	install -m 755 $(VGPUD) $(VGPU_WORKER) $(VGPU_RUN) $(VGPUCTL) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(FRONTEND) $(NVML) $(DESTDIR)$(PREFIX)/lib/vgpu/

clean:
	rm -rf build

-include $(shell find $(O)/obj -name '*.d' 2>/dev/null)
.SECONDARY:
