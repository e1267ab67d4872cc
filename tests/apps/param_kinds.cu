// Kernel parameters of many kinds and alignments (a padded struct, char, short, a 3-byte struct,
// double, float4, a pointer, long long, bool, a 256-byte struct, unsigned char), in an order that
// forces padding between them. The kernel writes every value back; the host compares bits.
#include "apps.h"

#include <cstddef>

struct Padded {  // 4 + 4 padding + 8 + 1 + 7 padding = 24 bytes, 8-aligned
    int i;
    double d;
    char c;
};
struct Tiny {  // 3 bytes, 1-aligned
    char a, b, c;
};
struct Big {  // passed by value: a large parameter block
    int v[64];
};
struct Out {
    Padded s;
    char c;
    short sh;
    Tiny t;
    double d;
    float4 f4;
    unsigned long long ptr;
    int deref;
    long long ll;
    bool b;
    Big big;
    unsigned char uc;
};
static_assert(sizeof(Padded) == 24, "Padded layout");
static_assert(sizeof(Tiny) == 3, "Tiny layout");

__global__ void echo(char c, Padded s, short sh, Tiny t, double d, float4 f4, const int* p,
                     long long ll, bool b, Big big, unsigned char uc, Out* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    out->s.i = s.i;  // field by field: padding bytes of the output keep their memset value
    out->s.d = s.d;
    out->s.c = s.c;
    out->c = c;
    out->sh = sh;
    out->t.a = t.a;
    out->t.b = t.b;
    out->t.c = t.c;
    out->d = d;
    out->f4 = f4;
    out->ptr = (unsigned long long)p;
    out->deref = p[0] + p[1];
    out->ll = ll;
    out->b = b;
    for (int k = 0; k < 64; k++) out->big.v[k] = big.v[k];
    out->uc = uc;
}

// Bitwise equality of one field (also distinguishes -0.0 from 0.0 and keeps NaN payloads).
template <typename T>
static void same_bits(const T& got, const T& want, const char* field, const char* how) {
    if (memcmp(&got, &want, sizeof(T)) != 0) apps::fail("%s: field %s differs", how, field);
}

static float float_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);

    // Values with distinctive bit patterns: sign bits, a subnormal, infinity, a NaN payload.
    Padded s;
    memset(&s, 0, sizeof s);
    s.i = -123456789;
    s.d = 4.9406564584124654e-324;  // smallest subnormal double
    s.c = 'Z';
    const char c = -77;
    const short sh = -31000;
    const Tiny t = {'x', -1, 127};
    const double d = -1.0 / 3.0;
    const float4 f4 = make_float4(-0.0f, 1e-40f, INFINITY, float_from_bits(0x7fc01234u));
    const long long ll = -0x123456789abcdefLL;
    const bool b = true;
    Big big;
    for (int k = 0; k < 64; k++) big.v[k] = k * k * 1000 - 7;
    const unsigned char uc = 0xfe;
    const int ints[2] = {12345, -678};

    // ---- Part A: no kernels
    apps::device_query();
    int* d_ints;
    Out* d_out;
    CHECK(cudaMalloc(&d_ints, sizeof ints));
    CHECK(cudaMalloc(&d_out, sizeof(Out)));
    apps::check_buffer(d_ints, ints, sizeof ints);
    Out zero;
    memset(&zero, 0, sizeof zero);
    apps::check_buffer(d_out, &zero, sizeof zero);
    printf("A: copies and memsets ok\n");

    // ---- Part B: kernels, launched with <<<>>> and with cudaLaunchKernel.
    for (int how = 0; how < 2; how++) {
        const char* how_name = how == 0 ? "<<<>>>" : "cudaLaunchKernel";
        CHECK(cudaMemset(d_out, 0, sizeof(Out)));
        if (how == 0) {
            echo<<<1, 32>>>(c, s, sh, t, d, f4, d_ints, ll, b, big, uc, d_out);
            LAUNCH_CHECK("echo <<<>>>");
        } else {
            const int* p = d_ints;
            Out* o = d_out;
            void* args[] = {(void*)&c, (void*)&s, (void*)&sh, (void*)&t, (void*)&d, (void*)&f4,
                            (void*)&p, (void*)&ll, (void*)&b, (void*)&big, (void*)&uc, (void*)&o};
            cudaError_t rc = cudaLaunchKernel((const void*)echo, dim3(1), dim3(32), args, 0, 0);
            LAUNCH_CHECK_RC(rc, "cudaLaunchKernel(echo)");
        }
        Out got;
        CHECK(cudaMemcpy(&got, d_out, sizeof got, cudaMemcpyDeviceToHost));
        same_bits(got.s.i, s.i, "Padded.i", how_name);
        same_bits(got.s.d, s.d, "Padded.d", how_name);
        same_bits(got.s.c, s.c, "Padded.c", how_name);
        same_bits(got.c, c, "char", how_name);
        same_bits(got.sh, sh, "short", how_name);
        same_bits(got.t.a, t.a, "Tiny.a", how_name);
        same_bits(got.t.b, t.b, "Tiny.b", how_name);
        same_bits(got.t.c, t.c, "Tiny.c", how_name);
        same_bits(got.d, d, "double", how_name);
        same_bits(got.f4.x, f4.x, "float4.x", how_name);
        same_bits(got.f4.y, f4.y, "float4.y", how_name);
        same_bits(got.f4.z, f4.z, "float4.z", how_name);
        same_bits(got.f4.w, f4.w, "float4.w", how_name);
        same_bits(got.ptr, (unsigned long long)(uintptr_t)d_ints, "pointer", how_name);
        same_bits(got.deref, ints[0] + ints[1], "*pointer", how_name);
        same_bits(got.ll, ll, "long long", how_name);
        same_bits(got.b, b, "bool", how_name);
        for (int k = 0; k < 64; k++) same_bits(got.big.v[k], big.v[k], "Big.v", how_name);
        same_bits(got.uc, uc, "unsigned char", how_name);
        printf("B: all parameter values echoed exactly (%s) ok\n", how_name);
    }

    CHECK(cudaFree(d_ints));
    CHECK(cudaFree(d_out));
    printf("PASS param_kinds\n");
    return 0;
}
