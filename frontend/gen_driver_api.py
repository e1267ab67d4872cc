#!/usr/bin/env python3
"""Generate the frontend's driver API surface from the CUDA toolkit headers.

Outputs (in --out):
  vgpu_driver_exports.c  every function the real libcuda.so.1 exports (cuda.h, cudaProfiler.h and
                         the GL, EGL and VDPAU interop headers, preprocessed as the driver itself is
                         built: __CUDA_API_VERSION_INTERNAL), each a weak alias of its own "not
                         supported" stand-in (which logs the name once); the frontend's own
                         definitions override the aliases at link time.
  vgpu_driver_procs.c    the table behind cuGetProcAddress: (name, per-thread variant, version) ->
                         exported symbol, from cudaTypedefs.h's PFN_<name>_v<version>[_ptds|_ptsz]
                         typedefs, plus the CUresult name table.
  vgpu_driver_api.h      declarations for the two tables.

The version of a PFN typedef is the driver version in which that signature appeared. For each name
(and per-thread variant) the typedefs, in increasing version order, correspond one to one with the
exported symbols name, name_v2, name_v3, ... that exist (the generator checks this and fails
otherwise), which is how a versioned request finds its symbol.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# The graphics interop headers include the graphics APIs' own headers. Only the names of functions
# are read here, never their types, so empty stand-ins are enough.
GRAPHICS_HEADERS = ["GL/gl.h", "EGL/egl.h", "EGL/eglext.h", "vdpau/vdpau.h"]
API_HEADERS = ["cuda.h", "cudaProfiler.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"]
TYPEDEF_HEADERS = ["cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h",
                   "cudaVDPAUTypedefs.h"]


def preprocess(cc, include, source, stand_ins):
    cmd = [cc, "-E", "-P", "-D__CUDA_API_VERSION_INTERNAL", "-I", include, "-I", stand_ins, "-x", "c", "-"]
    out = subprocess.run(cmd, input=source, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("gen_driver_api: preprocessing failed:\n" + out.stderr)
    return out.stdout


def exported_functions(text):
    flat = " ".join(text.split())
    names = set(re.findall(r"\bCUresult\s+(?:__attribute__\(\(\w+\)\)\s+)?(cu\w+)\s*\(", flat))
    return sorted(names)


def proc_typedefs(text):
    return re.findall(r"\(\s*\*\s*PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)", text)


TRACE_TYPEDEF_HEADERS = ["cudaTypedefs.h", "cudaProfilerTypedefs.h"]  # whose types cuda.h declares


def typedef_params(text):
    """PFN_<name>_v<version>[_ptds|_ptsz] -> (parameter list, parameter names), for the typedefs whose
    every parameter is named."""
    flat = " ".join(text.split())
    params = {}
    for typedef, plist in re.findall(r"typedef\s+CUresult\s*\(\s*\*\s*(PFN_cu\w+)\s*\)\s*\(([^;]*)\)\s*;", flat):
        plist = plist.strip()
        if plist in ("", "void"):
            params[typedef] = ("", [])
            continue
        names = []
        for p in plist.split(","):
            m = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", p.strip())
            if not m or len(re.findall(r"\w+", p)) < 2:
                break
            names.append(m.group(1))
        else:
            params[typedef] = (plist, names)
    return params


def cuda_errors(text):
    m = re.search(r"enum\s+cudaError_enum\s*\{(.*?)\}", text, re.S)
    if not m:
        sys.exit("gen_driver_api: enum cudaError_enum not found")
    errors = []
    for name, value in re.findall(r"(CUDA_\w+)\s*=\s*(\d+)", m.group(1)):
        errors.append((int(value), name))
    return sorted(errors)


def describe(name):
    """A short description made from the enumerator's own name."""
    words = name
    for prefix in ("CUDA_ERROR_", "CUDA_"):
        if words.startswith(prefix):
            words = words[len(prefix):]
            break
    text = words.replace("_", " ").lower()
    return "no error" if name == "CUDA_SUCCESS" else text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda-include", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as stand_ins:
        for h in GRAPHICS_HEADERS:
            os.makedirs(os.path.join(stand_ins, os.path.dirname(h)), exist_ok=True)
            open(os.path.join(stand_ins, h), "w").close()
        api = preprocess(args.cc, args.cuda_include, "".join("#include <%s>\n" % h for h in API_HEADERS), stand_ins)
        typedefs = preprocess(args.cc, args.cuda_include, "".join("#include <%s>\n" % h for h in TYPEDEF_HEADERS),
                              stand_ins)
        traceable = typedef_params(preprocess(args.cc, args.cuda_include,
                                              "".join("#include <%s>\n" % h for h in TRACE_TYPEDEF_HEADERS),
                                              stand_ins))

    exports = exported_functions(api)
    if len(exports) < 500:
        sys.exit("gen_driver_api: only %d driver functions found; wrong headers?" % len(exports))
    export_set = set(exports)

    groups = collections.defaultdict(set)
    for base, version, variant in proc_typedefs(typedefs):
        groups[(base, variant or "")].add(int(version))

    procs = []  # (name, variant, version, symbol)
    reached = set()
    for (base, variant), versions in sorted(groups.items()):
        versions = sorted(versions)
        symbols = [n for n in [base + variant] + ["%s_v%d%s" % (base, i, variant) for i in range(2, 10)]
                   if n in export_set]
        if len(symbols) != len(versions):
            sys.exit("gen_driver_api: %s%s has versions %s but symbols %s" % (base, variant, versions, symbols))
        for version, symbol in zip(versions, symbols):
            procs.append((base, variant, version, symbol))
            reached.add(symbol)
    unreached = sorted(export_set - reached)

    errors = cuda_errors(api)
    os.makedirs(args.out, exist_ok=True)
    variant_code = {"": 0, "_ptds": 1, "_ptsz": 2}

    with open(os.path.join(args.out, "vgpu_driver_api.h"), "w") as f:
        f.write("/* Generated by frontend/gen_driver_api.py from the CUDA headers. Do not edit. */\n")
        f.write("#ifndef VGPU_DRIVER_API_H\n#define VGPU_DRIVER_API_H\n\n#include <stdint.h>\n\n")
        f.write("#define VGPU_DRIVER_EXPORT_COUNT %d\n\n" % len(exports))
        f.write("enum vgpu_proc_variant { VGPU_PROC_DEFAULT = 0, VGPU_PROC_PTDS = 1, VGPU_PROC_PTSZ = 2 };\n\n")
        f.write("struct vgpu_proc {\n    const char *name;\n    uint8_t variant;\n    int version;\n"
                "    void (*fn)(void);\n    void (*unsupported)(void); /* fn while the frontend lacks it */\n"
                "    void (*traced)(void);      /* fn, its result logged; NULL where not generated */\n};\n\n")
        f.write("/* Sorted by name, then variant, then version. */\n")
        f.write("extern const struct vgpu_proc vgpu_procs[];\nextern const unsigned vgpu_proc_count;\n\n")
        f.write("struct vgpu_error_name {\n    int value;\n    const char *name;\n    const char *text;\n};\n\n")
        f.write("extern const struct vgpu_error_name vgpu_error_names[];\nextern const unsigned vgpu_error_name_count;\n\n")
        f.write("/* What every unimplemented export does: CUDA_ERROR_NOT_SUPPORTED, its name logged once. */\n")
        f.write("int vgpu_driver_unsupported(const char *name, _Atomic int *logged);\n\n")
        f.write("/* One stand-in per export, each the weak definition of its name. */\n")
        for name in exports:
            f.write("int vgpu_unsupported_%s(void);\n" % name)
        f.write("\n/* Logs a traced call's result (trace level; failures at debug) and returns it. */\n")
        f.write("int vgpu_driver_traced(const char *name, int result);\n")
        f.write("\n#endif\n")

    with open(os.path.join(args.out, "vgpu_driver_exports.c"), "w") as f:
        f.write("/* Generated by frontend/gen_driver_api.py from the CUDA headers. Do not edit.\n"
                " * Every exported name of the real driver, as a weak alias of its own stand-in that\n"
                " * answers CUDA_ERROR_NOT_SUPPORTED; the frontend's definitions override the aliases.\n"
                " * Exports reachable through cuGetProcAddress: %d; only by name: %s. */\n"
                % (len(reached), ", ".join(unreached) or "none"))
        f.write('#include "vgpu_driver_api.h"\n\n')
        f.write("/* The arguments of the real signatures are ignored. */\n")
        for name in exports:
            f.write("int vgpu_unsupported_%s(void)\n{\n    static _Atomic int logged;\n"
                    "    return vgpu_driver_unsupported(\"%s\", &logged);\n}\n" % (name, name))
            f.write('int %s(void) __attribute__((weak, alias("vgpu_unsupported_%s")));\n\n' % (name, name))

    # Tracing wrappers, one per versioned entry whose typedef has named parameters of cuda.h's types.
    traced = {}
    for base, variant, version, symbol in procs:
        typedef = "PFN_%s_v%d%s" % (base, version, variant)
        if typedef in traceable and not base.startswith("cuLogs"):  # the log notes its own misuse
            traced[symbol] = (typedef,) + traceable[typedef]
    # The link renames (objcopy --redefine-syms over the frontend's objects): each traced function's
    # implementation becomes vgpu_impl_NAME and its wrapper takes the exported name, so that the
    # application's direct calls are logged as well as those made through cuGetProcAddress; the
    # frontend's own calls go to the implementations.
    with open(os.path.join(args.out, "vgpu_driver_renames.txt"), "w") as f:
        for symbol in sorted(traced):
            f.write("%s vgpu_impl_%s\nvgpu_traced_%s %s\n" % (symbol, symbol, symbol, symbol))
    with open(os.path.join(args.out, "vgpu_driver_trace.c"), "w") as f:
        f.write("/* Generated by frontend/gen_driver_api.py from the CUDA headers. Do not edit.\n"
                " * Wrappers that log a call's result (the driver's log, cuLogs*): the link gives each\n"
                " * the exported name of its function (vgpu_driver_renames.txt). */\n")
        f.write("#include <cuda.h>\n#include <cudaTypedefs.h>\n#include <cudaProfilerTypedefs.h>\n\n")
        f.write('#include "vgpu_driver_api.h"\n')
        for symbol in sorted(traced):
            typedef, plist, names = traced[symbol]
            f.write("\nCUresult vgpu_traced_%s(%s);\nCUresult vgpu_traced_%s(%s)\n{\n"
                    % (symbol, plist or "void", symbol, plist or "void"))
            f.write('    return vgpu_driver_traced("%s", ((%s)(void (*)(void))%s)(%s));\n}\n'
                    % (symbol, typedef, symbol, ", ".join(names)))

    with open(os.path.join(args.out, "vgpu_driver_procs.c"), "w") as f:
        f.write("/* Generated by frontend/gen_driver_api.py from the CUDA headers. Do not edit. */\n")
        f.write('#include "vgpu_driver_api.h"\n\n')
        for name in exports:
            f.write("extern void %s(void);\n" % name)
        for symbol in sorted(traced):
            f.write("extern void vgpu_traced_%s(void);\n" % symbol)
        f.write("\nconst struct vgpu_proc vgpu_procs[] = {\n")
        for base, variant, version, symbol in sorted(procs, key=lambda p: (p[0], variant_code[p[1]], p[2])):
            f.write('    {"%s", %d, %d, %s, (void (*)(void))vgpu_unsupported_%s, %s},\n'
                    % (base, variant_code[variant], version, symbol, symbol,
                       "vgpu_traced_" + symbol if symbol in traced else "0"))
        f.write("};\nconst unsigned vgpu_proc_count = sizeof vgpu_procs / sizeof vgpu_procs[0];\n\n")
        f.write("const struct vgpu_error_name vgpu_error_names[] = {\n")
        for value, name in errors:
            f.write('    {%d, "%s", "%s"},\n' % (value, name, describe(name)))
        f.write("};\nconst unsigned vgpu_error_name_count = sizeof vgpu_error_names / sizeof vgpu_error_names[0];\n")
    print("gen_driver_api: %d exports, %d versioned entries, %d error codes" % (len(exports), len(procs), len(errors)))


if __name__ == "__main__":
    main()
