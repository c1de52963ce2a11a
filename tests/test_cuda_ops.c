/* On a GPU: the op-case table. Every non-elementwise op family (indexing:
   take, take_along_axis, advanced indexing, set/inc_subtensor with slices
   and with repeated indices, one_hot; sorting: sort, argsort, top_k; random
   streams and dropout; convolution: conv1d/2d/3d with stride, padding,
   dilation, groups and 'same' padding, conv_transpose (Im2Col and Col2Im);
   pooling (Pool): max, avg (padding counted or not), global avg; Size, reshape
   and flatten; eye of sizes read from values; cumsum and cumprod) compiled twice from the same builder,
   once for the GPU and once for the CPU (tn_func_desc.context "cpu"), called
   twice with the same inputs, for every dtype the family takes and every
   input layout:
     contiguous   the inputs as they are
     transposed   each input transposed inside the graph (a strided device view)
     sliced       each input a step-2 slice inside the graph (a strided device view)
     host-view    each input passed as a strided host array (packed by the transfer)
     shared       each input a shared variable (it lives on the device)
   Outputs are compared as follows: ints, bools, indices and random draws
   exactly (random streams promise the CPU's bits on the GPU; NaN equals NaN);
   floats by NMSE = sum (gpu - cpu)^2 / sum cpu^2 over the elements the CPU
   gives finite (NaN and inf must sit at the same places), at most 1e-5 for
   float16 (a few ulps of its 2^-11 rounding), 1e-10 for float32 and 1e-24
   for float64 (about 1e-5 and 1e-12 relative RMS: far above reordered
   sums, far below a wrong element). Differentiable families compare the
   gradients of sum(out * W), W fixed random weights, with respect to every
   float input the same way. Inputs of sort, top_k, take and max pooling hold
   NaN, +-inf, -0 and subnormals. The GPU function must run the family's op
   on the device (its debugprint names the Gpu op; no op the back end runs
   lies on the host) and the CPU function none.
   Without a usable GPU it prints "SKIP (no usable GPU: why)" and counts nothing. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include <stdint.h>

#define DT(t) (1u << (t))
#define FLOATS (DT(TN_F16) | DT(TN_F32) | DT(TN_F64))
#define INTS (DT(TN_I32) | DT(TN_I64))
#define ALL (DT(TN_BOOL) | INTS | FLOATS)

enum { IN_DATA, IN_I64, IN_I32, IN_UNIQUE };   /* input kinds: the case's dtype; indices; distinct int64 indices */
typedef struct in_spec {
    int kind, ndim;
    int64_t shape[5];
    double lo, hi;      /* data: uniform in [lo, hi) (ints: floored); indices: ints in [lo, hi); unique: axis size hi */
} in_spec;

enum { RULE_NMSE, RULE_EXACT };
enum { EDGE = 1, OWN_SLICES = 2 };   /* floats by NMSE (ints always exact), or every output bit for bit */
typedef int (*builder)(tn_graph *g, tn_var *const *in, tn_dtype t, tn_var **out);   /* outputs made (<= 2); 0: failed */

typedef struct op_case {
    const char *family;
    const char *on_gpu;   /* what the GPU function's debugprint must show */
    unsigned dtypes;      /* DT() of the dtypes it takes */
    int rule;
    bool grad;            /* compare gradients wrt the float inputs */
    int flags;            /* EDGE: NaN, +-inf, -0 and subnormals among float data;
                             OWN_SLICES: it slices its input itself (set/inc_subtensor
                             takes one slice per axis): no sliced layout */
    builder build;
    int n_in;
    in_spec in[3];
} op_case;

#define BUILDER(name) static int name(tn_graph *g, tn_var *const *in, tn_dtype t, tn_var **out)
#define UNUSED_GT (void)g; (void)t

static tn_conv_opts copts(int s0, int s1, int s2, int p0, int p1, int p2, int d0, int d1, int d2, int groups) {
    tn_conv_opts o;
    memset(&o, 0, sizeof o);
    o.stride[0] = s0; o.stride[1] = s1; o.stride[2] = s2;
    o.padding[0] = p0; o.padding[1] = p1; o.padding[2] = p2;
    o.dilation[0] = d0; o.dilation[1] = d1; o.dilation[2] = d2;
    o.groups = groups;
    return o;
}
static tn_conv_opts pool_opts(int k0, int k1, int k2, int s0, int s1, int p0, int p1, bool exclude) {
    tn_conv_opts o = copts(s0, s1, 0, p0, p1, 0, 0, 0, 0, 0);
    o.kernel[0] = k0; o.kernel[1] = k1; o.kernel[2] = k2;
    o.avg_exclude_pad = exclude;
    return o;
}

/* indexing */
BUILDER(b_take0) { UNUSED_GT; out[0] = tn_take(in[0], in[1], 0); return 1; }
BUILDER(b_take1) { UNUSED_GT; out[0] = tn_take(in[0], in[1], 1); return 1; }
BUILDER(b_along) { UNUSED_GT; out[0] = tn_take_along_axis(in[0], in[1], 1); return 1; }
BUILDER(b_index) { UNUSED_GT; out[0] = tn_index(in[0], 0, 2, (tn_var *[]){ in[1], in[2] }); return 1; }
BUILDER(b_inc_rep) { UNUSED_GT; out[0] = tn_inc_subtensor(tn_take(in[0], in[1], 0), in[2]); return 1; }
BUILDER(b_set_take) { UNUSED_GT; out[0] = tn_set_subtensor(tn_take(in[0], in[1], 1), in[2]); return 1; }
BUILDER(b_inc_index) { UNUSED_GT; out[0] = tn_inc_subtensor(tn_index(in[0], 0, 2, (tn_var *[]){ in[1], in[2] }), tn_lit(in[0], 1)); return 1; }
BUILDER(b_inc_slice) { UNUSED_GT; out[0] = tn_inc_subtensor(tn_slice(tn_slice(in[0], 0, 1, TN_NONE, 2), 1, TN_NONE, TN_NONE, -1), in[1]); return 1; }
BUILDER(b_set_slice) { UNUSED_GT; out[0] = tn_set_subtensor(tn_slice(in[0], 1, 2, 20, 3), in[1]); return 1; }
BUILDER(b_one_hot) { (void)g; out[0] = tn_one_hot(in[0], 10, t); return 1; }
/* sorting */
BUILDER(b_sort0) { UNUSED_GT; out[0] = tn_sort(in[0], 0); return 1; }
BUILDER(b_sort1) { UNUSED_GT; out[0] = tn_sort(in[0], -1); return 1; }
BUILDER(b_argsort0) { UNUSED_GT; out[0] = tn_argsort(in[0], 0); return 1; }
BUILDER(b_argsort1) { UNUSED_GT; out[0] = tn_argsort(in[0], 1); return 1; }
BUILDER(b_topk1) { UNUSED_GT; return tn_top_k(in[0], 3, 1, &out[0], &out[1]) == TN_OK ? 2 : 0; }
BUILDER(b_topk0) { UNUSED_GT; return tn_top_k(in[0], 5, 0, &out[0], &out[1]) == TN_OK ? 2 : 0; }
/* random streams: two draws of one stream (the second at its own offset) */
#define RSHAPE 2, (const int64_t[]){ 33, 101 }
BUILDER(b_uniform) {
    (void)in;
    tn_rstream *s = tn_random_stream(g, 0x5eed0001ull);
    out[0] = tn_random_uniform(s, t, RSHAPE, -1.5, 2.5);
    out[1] = tn_random_uniform(s, t, 1, (const int64_t[]){ 7 }, 0, 1);
    return 2;
}
BUILDER(b_normal) {
    (void)in;
    tn_rstream *s = tn_random_stream(g, 0x5eed0002ull);
    out[0] = tn_random_normal(s, t, RSHAPE, 0.5, 2);
    out[1] = tn_random_normal(s, t, 1, (const int64_t[]){ 9 }, 0, 1);
    return 2;
}
BUILDER(b_bernoulli) {
    (void)in;
    tn_rstream *s = tn_random_stream(g, 0x5eed0003ull);
    out[0] = tn_random_bernoulli(s, t, RSHAPE, 0.3);
    out[1] = tn_random_bernoulli(s, t, 1, (const int64_t[]){ 5 }, 0.9);
    return 2;
}
BUILDER(b_randint) {
    (void)in;
    tn_rstream *s = tn_random_stream(g, 0x5eed0004ull);
    out[0] = tn_random_randint(s, t, RSHAPE, -1000, 1000003);
    out[1] = tn_random_randint(s, t, 1, (const int64_t[]){ 11 }, 0, 2);
    return 2;
}
BUILDER(b_dropout) { (void)t; out[0] = tn_dropout(tn_random_stream(g, 0x5eed0005ull), in[0], 0.25); return 1; }
/* convolution */
BUILDER(b_conv2d_pad1) { UNUSED_GT; tn_conv_opts o = copts(0, 0, 0, 1, 1, 0, 0, 0, 0, 0); out[0] = tn_conv2d(in[0], in[1], &o); return 1; }
BUILDER(b_conv2d_sdg) { UNUSED_GT; tn_conv_opts o = copts(2, 2, 0, 2, 1, 0, 2, 2, 0, 2); out[0] = tn_conv2d(in[0], in[1], &o); return 1; }
BUILDER(b_conv2d_same) {
    UNUSED_GT;
    tn_conv_opts o = copts(0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    o.pad_mode = TN_PAD_SAME;
    out[0] = tn_conv2d(in[0], in[1], &o);
    return 1;
}
BUILDER(b_conv1d) { UNUSED_GT; tn_conv_opts o = copts(2, 0, 0, 1, 0, 0, 0, 0, 0, 0); out[0] = tn_conv1d(in[0], in[1], &o); return 1; }
BUILDER(b_conv3d) { UNUSED_GT; tn_conv_opts o = copts(1, 2, 1, 1, 1, 1, 0, 0, 0, 0); out[0] = tn_conv3d(in[0], in[1], &o); return 1; }
BUILDER(b_convt2d) {
    UNUSED_GT;
    tn_conv_opts o = copts(2, 2, 0, 1, 0, 0, 0, 0, 0, 2);
    o.output_padding[0] = o.output_padding[1] = 1;
    out[0] = tn_conv2d_transpose(in[0], in[1], &o);
    return 1;
}
BUILDER(b_convt1d) { UNUSED_GT; tn_conv_opts o = copts(0, 0, 0, 1, 0, 0, 2, 0, 0, 0); out[0] = tn_conv_transpose(in[0], in[1], &o); return 1; }
/* pooling */
BUILDER(b_maxpool2) { UNUSED_GT; tn_conv_opts o = pool_opts(2, 2, 0, 0, 0, 0, 0, false); out[0] = tn_max_pool2d(in[0], &o); return 1; }
BUILDER(b_maxpool32) { UNUSED_GT; tn_conv_opts o = pool_opts(3, 2, 0, 2, 1, 1, 1, false); out[0] = tn_max_pool2d(in[0], &o); return 1; }
BUILDER(b_maxpool1d) { UNUSED_GT; tn_conv_opts o = pool_opts(3, 0, 0, 2, 0, 1, 0, false); out[0] = tn_max_pool(in[0], &o); return 1; }
BUILDER(b_avgpool33) { UNUSED_GT; tn_conv_opts o = pool_opts(3, 3, 0, 0, 0, 1, 1, false); out[0] = tn_avg_pool2d(in[0], &o); return 1; }
BUILDER(b_avgpool_ex) { UNUSED_GT; tn_conv_opts o = pool_opts(3, 2, 0, 2, 2, 1, 1, true); out[0] = tn_avg_pool2d(in[0], &o); return 1; }
BUILDER(b_avgpool3d) { UNUSED_GT; tn_conv_opts o = pool_opts(2, 2, 2, 0, 0, 0, 0, false); out[0] = tn_avg_pool(in[0], &o); return 1; }
BUILDER(b_maxpool_dl) { UNUSED_GT; tn_conv_opts o = pool_opts(3, 2, 0, 1, 2, 1, 1, false); o.dilation[0] = 2; out[0] = tn_max_pool2d(in[0], &o); return 1; }
BUILDER(b_maxpool3d) { UNUSED_GT; tn_conv_opts o = pool_opts(2, 3, 2, 0, 0, 1, 1, false); out[0] = tn_max_pool(in[0], &o); return 1; }
BUILDER(b_avgpool_one) { UNUSED_GT; tn_conv_opts o = pool_opts(4, 4, 0, 0, 0, 0, 0, false); out[0] = tn_avg_pool2d(in[0], &o); return 1; }
BUILDER(b_avgpool_w) { UNUSED_GT; tn_conv_opts o = pool_opts(3, 2, 0, 1, 2, 1, 1, true); out[0] = tn_avg_pool2d(in[0], &o); return 1; }
BUILDER(b_avgpool2) { UNUSED_GT; tn_conv_opts o = pool_opts(2, 2, 0, 0, 0, 0, 0, false); out[0] = tn_avg_pool2d(in[0], &o); return 1; }
/* windows apart (stride 3 > kernel 2): elements in no window, whose gradient is 0 */
BUILDER(b_maxpool_gap) { UNUSED_GT; tn_conv_opts o = pool_opts(2, 2, 0, 3, 3, 0, 0, false); out[0] = tn_max_pool2d(in[0], &o); return 1; }
BUILDER(b_avgpool_gap) { UNUSED_GT; tn_conv_opts o = pool_opts(2, 2, 0, 3, 3, 1, 0, true); out[0] = tn_avg_pool2d(in[0], &o); return 1; }
BUILDER(b_gap) { UNUSED_GT; out[0] = tn_global_avg_pool(in[0]); return 1; }
/* shapes */
BUILDER(b_size) {
    UNUSED_GT;
    out[0] = tn_size(in[0], (const int[]){ 0, 2 }, 2, false);
    out[1] = tn_size(in[0], (const int[]){ 1 }, 1, true);
    return 2;
}
BUILDER(b_reshape) {
    UNUSED_GT;
    out[0] = tn_flatten(in[0], 2);
    out[1] = tn_reshape(in[0], 2, (const int64_t[]){ 6, -1 });
    return 2;
}
BUILDER(b_eye) { (void)g; out[0] = tn_eye_var(t, in[0], in[1], in[2]); return 1; }
/* Join along the middle axis, and along the last of both inputs with their last two axes swapped (strided) */
BUILDER(b_join) {
    UNUSED_GT;
    static const int swap[3] = { 0, 2, 1 };
    out[0] = tn_concatenate(2, (tn_var *[]){ in[0], in[1] }, 1);
    out[1] = tn_concatenate(2, (tn_var *[]){ tn_dimshuffle(in[0], 3, swap), tn_dimshuffle(in[1], 3, swap) }, 2);
    return 2;
}
/* cumulative */
BUILDER(b_cumsum0) { UNUSED_GT; out[0] = tn_cumsum(in[0], 0); return 1; }
BUILDER(b_cumsum1) { UNUSED_GT; out[0] = tn_cumsum(in[0], -1); return 1; }
BUILDER(b_cumprod1) { UNUSED_GT; out[0] = tn_cumprod(in[0], 1); return 1; }

#define D(nd, ...) { IN_DATA, nd, { __VA_ARGS__ }, -3, 3 }
#define DR(lo, hi, nd, ...) { IN_DATA, nd, { __VA_ARGS__ }, lo, hi }
#define I64(lo, hi, nd, ...) { IN_I64, nd, { __VA_ARGS__ }, lo, hi }
#define I32(lo, hi, nd, ...) { IN_I32, nd, { __VA_ARGS__ }, lo, hi }
#define UNIQ(axis_size, n) { IN_UNIQUE, 1, { n }, 0, axis_size }

static const op_case op_cases[] = {
    /* indexing */
    { "take axis 0", "GpuAdvancedSubtensor", ALL, RULE_NMSE, true, EDGE, b_take0, 2, { D(2, 7, 40), I64(-7, 7, 2, 3, 5) } },
    { "take axis 1, int32 indices", "GpuAdvancedSubtensor", ALL, RULE_NMSE, true, EDGE, b_take1, 2, { D(2, 6, 40), I32(-40, 40, 1, 9) } },
    { "take_along_axis axis 1", "GpuTakeAlongAxis", ALL, RULE_NMSE, true, 0, b_along, 2, { D(2, 6, 9), I64(-9, 9, 2, 6, 20) } },
    { "x[i, j]", "GpuAdvancedSubtensor", ALL, RULE_NMSE, true, 0, b_index, 3, { D(2, 64, 10), I64(-64, 64, 1, 64), I32(-10, 10, 1, 64) } },
    { "inc_subtensor x[i] += v, repeated i", "GpuAdvancedIncSubtensor", ALL, RULE_NMSE, true, 0, b_inc_rep, 3,
      { D(2, 5, 33), I64(-5, 5, 1, 400), D(2, 400, 33) } },
    { "inc_subtensor x[i, j] += 1, repeated (i, j)", "GpuAdvancedIncSubtensor", ALL, RULE_NMSE, true, 0, b_inc_index, 3,
      { D(2, 6, 7), I64(-6, 6, 1, 300), I64(-7, 7, 1, 300) } },
    { "set_subtensor x[:, j] = v, distinct j", "GpuAdvancedIncSubtensor", ALL, RULE_NMSE, true, 0, b_set_take, 3,
      { D(2, 5, 33), UNIQ(33, 11), D(2, 5, 11) } },
    { "inc_subtensor x[1::2, ::-1] += v", "GpuIncSubtensor", ALL, RULE_NMSE, true, OWN_SLICES, b_inc_slice, 2, { D(2, 9, 300), D(1, 300) } },
    { "set_subtensor x[:, 2:20:3] = v", "GpuIncSubtensor", ALL, RULE_NMSE, true, OWN_SLICES, b_set_slice, 2, { D(2, 9, 30), D(2, 9, 6) } },
    { "one_hot(labels, 10)", "GpuElemwise", ALL, RULE_NMSE, false, 0, b_one_hot, 1, { I64(-2, 12, 2, 6, 7) } },
    /* sorting */
    { "sort axis 0", "GpuArgSort{axis=0}", ALL, RULE_NMSE, true, EDGE, b_sort0, 1, { DR(-20, 20, 2, 300, 7) } },
    { "sort axis -1, long rows", "GpuArgSort{axis=1}", ALL, RULE_NMSE, true, EDGE, b_sort1, 1, { DR(-20, 20, 2, 3, 3000) } },
    { "argsort axis 0, long columns", "GpuArgSort{axis=0}", ALL, RULE_EXACT, false, EDGE, b_argsort0, 1, { DR(-5, 5, 2, 2500, 2) } },
    { "argsort axis 1, ties", "GpuArgSort{axis=1}", ALL, RULE_EXACT, false, EDGE, b_argsort1, 1, { DR(-5, 5, 2, 20, 50) } },
    { "top_k k=3 axis 1", "GpuTopK{axis=1, k=3}", ALL, RULE_NMSE, true, EDGE, b_topk1, 1, { DR(-4, 4, 2, 50, 30) } },
    { "top_k k=5 axis 0", "GpuTopK{axis=0, k=5}", ALL, RULE_NMSE, true, EDGE, b_topk0, 1, { DR(-4, 4, 2, 40, 6) } },
    /* random streams */
    { "random uniform", "GpuRandom{uniform", FLOATS, RULE_EXACT, false, 0, b_uniform, 0, { { 0 } } },
    { "random normal", "GpuRandom{normal", FLOATS, RULE_EXACT, false, 0, b_normal, 0, { { 0 } } },
    { "random bernoulli", "GpuRandom{bernoulli", ALL, RULE_EXACT, false, 0, b_bernoulli, 0, { { 0 } } },
    { "random randint", "GpuRandom{randint", INTS, RULE_EXACT, false, 0, b_randint, 0, { { 0 } } },
    { "dropout p=0.25", "random{bernoulli,draw=0}", FLOATS, RULE_NMSE, true, 0, b_dropout, 1, { D(2, 37, 65) } },
    /* convolution */
    { "conv2d pad 1", "GpuIm2Col", FLOATS, RULE_NMSE, true, 0, b_conv2d_pad1, 2, { D(4, 2, 3, 9, 8), DR(-1, 1, 4, 4, 3, 3, 3) } },
    { "conv2d stride 2 pad (2,1) dilation 2 groups 2", "GpuIm2Col", FLOATS, RULE_NMSE, true, 0, b_conv2d_sdg, 2,
      { D(4, 2, 4, 11, 10), DR(-1, 1, 4, 6, 2, 3, 2) } },
    { "conv2d pad same, even kernel", "GpuIm2Col", FLOATS, RULE_NMSE, true, 0, b_conv2d_same, 2, { D(4, 2, 3, 7, 7), DR(-1, 1, 4, 2, 3, 4, 4) } },
    { "conv1d stride 2 pad 1", "GpuIm2Col", FLOATS, RULE_NMSE, true, 0, b_conv1d, 2, { D(3, 3, 4, 17), DR(-1, 1, 3, 5, 4, 3) } },
    { "conv3d stride (1,2,1) pad 1", "GpuIm2Col", FLOATS, RULE_NMSE, true, 0, b_conv3d, 2, { D(5, 1, 2, 5, 6, 4), DR(-1, 1, 5, 3, 2, 2, 3, 2) } },
    { "conv2d_transpose stride 2 pad (1,0) output_padding 1 groups 2", "GpuCol2Im", FLOATS, RULE_NMSE, true, 0, b_convt2d, 2,
      { D(4, 2, 4, 5, 4), DR(-1, 1, 4, 4, 3, 3, 3) } },
    { "conv_transpose 1d pad 1 dilation 2", "GpuCol2Im", FLOATS, RULE_NMSE, true, 0, b_convt1d, 2, { D(3, 2, 3, 7), DR(-1, 1, 3, 3, 2, 3) } },
    /* pooling */
    { "max_pool2d 2x2", "GpuPool{", FLOATS, RULE_NMSE, true, EDGE, b_maxpool2, 1, { D(4, 2, 3, 8, 6) } },
    { "max_pool2d 3x2 stride (2,1) pad 1", "GpuPool{", FLOATS, RULE_NMSE, true, EDGE, b_maxpool32, 1, { D(4, 2, 3, 9, 8) } },
    { "max_pool1d 3 stride 2 pad 1", "GpuPool{", FLOATS, RULE_NMSE, true, EDGE, b_maxpool1d, 1, { D(3, 2, 4, 15) } },
    { "avg_pool2d 3x3 pad 1", "GpuPool{", FLOATS, RULE_NMSE, true, 0, b_avgpool33, 1, { D(4, 2, 3, 8, 7) } },
    { "avg_pool2d 3x2 stride 2 pad 1 exclude pad", "GpuPool{", FLOATS, RULE_NMSE, true, 0, b_avgpool_ex, 1, { D(4, 2, 3, 9, 8) } },
    { "avg_pool3d 2x2x2", "GpuPool{", FLOATS, RULE_NMSE, true, 0, b_avgpool3d, 1, { D(5, 1, 2, 4, 6, 4) } },
    { "max_pool2d 3x2 stride (1,2) pad 1 dilation (2,1)", "GpuPool{", FLOATS, RULE_NMSE, true, EDGE, b_maxpool_dl, 1, { D(4, 2, 3, 9, 8) } },
    { "max_pool3d 2x3x2 pad (1,1,0)", "GpuPool{", FLOATS, RULE_NMSE, true, EDGE, b_maxpool3d, 1, { D(5, 2, 2, 4, 5, 4) } },
    { "avg_pool2d 4x4, one window per channel", "GpuPool{", FLOATS, RULE_NMSE, true, 0, b_avgpool_one, 1, { D(4, 1, 3, 4, 4) } },
    /* windows two wide, stride two along lines (tn_pool2w): lines by 16-byte loads, odd lines, padding */
    { "max_pool2d 2x2, lines of 64", "GpuPool{", FLOATS, RULE_EXACT, true, EDGE, b_maxpool2, 1, { D(4, 2, 3, 6, 64) } },
    { "max_pool2d 2x2, odd sizes (the last row and column in no window)", "GpuPool{", FLOATS, RULE_EXACT, true, EDGE, b_maxpool2, 1, { D(4, 2, 3, 7, 9) } },
    { "max_pool2d 2x2 stride 3 (windows apart)", "GpuPool{", FLOATS, RULE_EXACT, true, EDGE, b_maxpool_gap, 1, { D(4, 2, 3, 8, 11) } },
    { "avg_pool2d 2x2 stride 3 pad (1,0) exclude pad (windows apart)", "GpuPool{", FLOATS, RULE_EXACT, true, 0, b_avgpool_gap, 1, { D(4, 2, 3, 8, 11) } },
    { "avg_pool2d 2x2, lines of 34", "GpuPool{", FLOATS, RULE_EXACT, true, 0, b_avgpool2, 1, { D(4, 3, 2, 6, 34) } },
    { "avg_pool2d 3x2 stride (1,2) pad 1 exclude pad, lines of 40", "GpuPool{", FLOATS, RULE_EXACT, true, 0, b_avgpool_w, 1, { D(4, 2, 3, 7, 40) } },
    { "global_avg_pool", "GpuMean", FLOATS, RULE_NMSE, true, 0, b_gap, 1, { D(4, 2, 5, 6, 7) } },
    /* shapes */
    { "size over axes", "GpuSize", ALL, RULE_EXACT, false, 0, b_size, 1, { D(3, 4, 5, 6) } },
    { "flatten, reshape", "", ALL, RULE_EXACT, true, 0, b_reshape, 1, { D(3, 4, 5, 6) } },
    { "join (tn_concatenate) along axes 1 and 2", "GpuJoin", ALL, RULE_EXACT, true, 0, b_join, 2, { D(3, 4, 5, 5), D(3, 4, 3, 5) } },
    { "eye(n, m, k), sizes from values", "GpuEye", ALL, RULE_EXACT, false, 0, b_eye, 3, { I64(1, 60, 0), I64(0, 60, 0), I64(-8, 8, 0) } },
    /* cumulative */
    { "cumsum axis 0", "GpuCumSum{axis=0}", ALL, RULE_NMSE, true, 0, b_cumsum0, 1, { D(2, 300, 5) } },
    { "cumsum axis -1", "GpuCumSum{axis=1}", ALL, RULE_NMSE, true, 0, b_cumsum1, 1, { D(2, 3, 700) } },
    { "cumprod axis 1", "GpuCumProd{axis=1}", ALL, RULE_NMSE, true, 0, b_cumprod1, 1, { DR(0.5, 1.6, 2, 4, 60) } },
};
#define N_CASES (int)(sizeof op_cases / sizeof op_cases[0])

enum { OPL_CONTIG, OPL_TRANSPOSED, OPL_SLICED, OPL_HOST_VIEW, OPL_SHARED, OPL_COUNT };
static const char *const opl_name[OPL_COUNT] = { "contiguous", "transposed", "sliced", "host-view", "shared" };

static double nmse_limit(tn_dtype t) { return t == TN_F16 ? 1e-5 : t == TN_F32 ? 1e-10 : 1e-24; }

/* The values of input i of case c in dtype t: the same in every layout. */
static tn_array *make_values(const op_case *c, int i, tn_dtype t, uint64_t seed) {
    const in_spec *s = &c->in[i];
    tn_array *u = tn_array_rand_uniform(TN_F64, s->ndim, s->shape, s->kind == IN_UNIQUE ? 0 : s->lo, s->kind == IN_UNIQUE ? 1 : s->hi, seed);
    if (!u) return NULL;
    double *d = (double *)u->data;
    int64_t n = tn_array_size(u);
    tn_dtype want = s->kind == IN_DATA ? t : s->kind == IN_I32 ? TN_I32 : TN_I64;
    if (s->kind == IN_UNIQUE) {          /* a shuffle of 0..hi-1, the first n, odd places counted from the end */
        int64_t m = (int64_t)s->hi, *perm = (int64_t *)malloc((size_t)m * sizeof *perm);
        for (int64_t k = 0; k < m; k++) perm[k] = k;
        uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
        for (int64_t k = m - 1; k > 0; k--) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int64_t j = (int64_t)((r >> 33) % (uint64_t)(k + 1)), tmp = perm[k];
            perm[k] = perm[j]; perm[j] = tmp;
        }
        for (int64_t k = 0; k < n; k++) d[k] = (double)(k % 2 ? perm[k] - m : perm[k]);
        free(perm);
    } else if (want == TN_BOOL) {
        for (int64_t k = 0; k < n; k++) d[k] = d[k] > 0.5 * (s->lo + s->hi);
    } else if (!tn_dtype_is_float(want)) {
        for (int64_t k = 0; k < n; k++) d[k] = floor(d[k]);
    } else if (c->flags & EDGE) {
        double sub = want == TN_F16 ? 1e-5 : want == TN_F32 ? 1e-40 : 1e-310;   /* subnormal in each */
        static const double specials[7] = { NAN, INFINITY, -INFINITY, -0.0, 0.0, 1, -1 };
        for (int64_t k = 0; k < n; k++)
            if (k % 23 == 5) {
                int w = (int)((k / 23) % 9);
                d[k] = w < 7 ? specials[w] : w == 7 ? sub : -sub;
            }
    }
    tn_array *v = tn_array_astype(u, want);
    tn_array_free(u);
    return v;
}

/* One compiled function's setup for a layout: the variables it takes, the
   arrays passed and what the builder sees. */
typedef struct built {
    tn_graph *g;
    tn_func *f;
    int n_args, n_fwd, n_out;      /* inputs passed; the builder's outputs; with the gradients */
    tn_var *args[3];
    tn_array *pass[3];
    char *dprint;
} built;

/* The input as `lay` lays it out: the variable declared, the value passed
   (NULL for a shared variable) and the view the builder gets. */
static tn_var *lay_input(tn_graph *g, int lay, const tn_array *v, tn_var **declared, tn_array **pass, tn_array **keep) {
    int nd = v->ndim;
    char name[8] = "in";
    *pass = NULL;
    *keep = NULL;
    if (lay == OPL_SHARED) return *declared = tn_shared_fixed(g, name, v);
    if (lay == OPL_TRANSPOSED && nd >= 2) {          /* declared reversed, the graph transposes it back */
        tn_array *tv = tn_array_transpose(v, NULL);
        *pass = tn_array_copy(tv);
        tn_array_free(tv);
        *declared = tn_input(g, name, v->dtype, nd, (*pass)->shape, NULL);
        return tn_transpose(*declared, NULL);
    }
    if (lay == OPL_SLICED && nd >= 1) {              /* declared 2n+1 wide, the graph takes [1::2] */
        int64_t sh[TN_MAX_DIMS];
        memcpy(sh, v->shape, sizeof(int64_t) * (size_t)nd);
        sh[nd - 1] = 2 * v->shape[nd - 1] + 1;
        *pass = tn_array_full(v->dtype, nd, sh, 7);
        tn_array *view = tn_array_slice(*pass, nd - 1, 1, sh[nd - 1], 2);
        tn_array_assign(view, v);
        tn_array_free(view);
        *declared = tn_input(g, name, v->dtype, nd, sh, NULL);
        return tn_slice(*declared, nd - 1, 1, TN_NONE, 2);
    }
    if (lay == OPL_HOST_VIEW && nd >= 1) {           /* a strided host array: transposed storage, else step 2 */
        if (nd >= 2) {
            tn_array *tv = tn_array_transpose(v, NULL);
            *keep = tn_array_copy(tv);
            tn_array_free(tv);
            *pass = tn_array_transpose(*keep, NULL);
        } else {
            *keep = tn_array_full(v->dtype, 1, (const int64_t[]){ 2 * v->shape[0] }, 7);
            *pass = tn_array_slice(*keep, 0, 0, 2 * v->shape[0], 2);
            tn_array_assign(*pass, v);
        }
        return *declared = tn_input(g, name, v->dtype, nd, v->shape, NULL);
    }
    *pass = tn_array_copy(v);
    return *declared = tn_input(g, name, v->dtype, nd, v->shape, NULL);
}

/* Builds case c for dtype t and layout lay in a fresh graph and compiles it
   for the GPU (cpu false) or the CPU; the outputs, then with grad the
   gradients of sum(out * W) wrt each float input. NULL f with why. */
static void build_case(const op_case *c, tn_dtype t, int lay, tn_array *const *vals, bool cpu, built *b, tn_array **keep, char *why, size_t cap) {
    memset(b, 0, sizeof *b);
    b->g = tn_graph_new();
    tn_var *seen[3], *declared[3], *outs[8] = { 0 };
    for (int i = 0; i < c->n_in; i++) {
        seen[i] = lay_input(b->g, lay, vals[i], &declared[i], &b->pass[i], &keep[i]);
        if (lay != OPL_SHARED) b->args[b->n_args++] = declared[i];
    }
    int n = c->build(b->g, seen, t, outs);
    for (int j = 0; j < n; j++)
        if (!outs[j]) n = 0;
    if (n == 0) { snprintf(why, cap, "building: %.300s", tn_last_error()); return; }
    b->n_out = b->n_fwd = n;
    if (c->grad && tn_dtype_is_float(t)) {
        tn_var *cost = NULL;
        for (int j = 0; j < n; j++) {
            if (!tn_dtype_is_float(tn_var_dtype(outs[j]))) continue;
            int nd = tn_var_ndim(outs[j]);
            int64_t sh[TN_MAX_DIMS];
            for (int d = 0; d < nd; d++) sh[d] = tn_var_dim(outs[j], d);
            tn_array *w = tn_array_rand_uniform(tn_var_dtype(outs[j]), nd, sh, -1, 1, 4242 + (uint64_t)j);
            tn_var *term = w ? tn_sum(tn_mul(outs[j], tn_constant(b->g, w)), NULL, 0, false) : NULL;
            tn_array_free(w);
            cost = cost ? tn_add(cost, term) : term;
        }
        int nw = 0;
        tn_var *wrt[3];
        for (int i = 0; i < c->n_in; i++)
            if (c->in[i].kind == IN_DATA) wrt[nw++] = declared[i];
        if (!cost || tn_grad(cost, nw, wrt, outs + n, NULL) != TN_OK) { snprintf(why, cap, "gradient: %.300s", tn_last_error()); return; }
        b->n_out += nw;
    }
    b->f = tn_function(b->g, &(tn_func_desc){ .n_inputs = b->n_args, .inputs = b->args, .n_outputs = b->n_out, .outputs = outs,
                                               .context = cpu ? "cpu" : NULL, .name = c->family });
    if (!b->f) { snprintf(why, cap, "compiling for the %s: %.300s", cpu ? "CPU" : "GPU", tn_last_error()); return; }
    FILE *m = tmpfile();
    if (m) { tn_debugprint_function(b->f, m); b->dprint = th_read_stream(m); }
}

static void built_free(built *b) {
    tn_function_free(b->f);
    tn_graph_free(b->g);
    for (int i = 0; i < 3; i++) tn_array_free(b->pass[i]);
    free(b->dprint);
}

/* Ops the CUDA back end runs: in a GPU function's outputs none may run on
   the host (a silent fallback). Views (DimShuffle, Slice) run on either side. */
static const char *const device_ops[] = { "Elemwise", "Sum", "Prod", "Mean", "Max", "Min", "Argmax", "Argmin", "All", "Any", "LogSumExp",
    "Softmax", "LogSoftmax", "Dot", "Gemm", "Gemv", "Outer", "Alloc", "Size", "CumSum", "CumProd", "AdvancedSubtensor", "AdvancedSubtensor1",
    "TakeAlongAxis", "AdvancedIncSubtensor", "AdvancedIncSubtensor1", "IncSubtensor", "ArgSort", "TopK", "Random", "Im2Col", "Col2Im", "Pool", "PoolGrad",
    "Eye" };

/* "" when the GPU function runs the case on the device; else the reason. */
static void check_placement(const op_case *c, const built *gpu, const built *cpu, char *why, size_t cap) {
    const char *dg = gpu->dprint ? gpu->dprint : "", *dc = cpu->dprint ? cpu->dprint : "";
    why[0] = 0;
    if (tn_function_device_steps(gpu->f) <= 0) { snprintf(why, cap, "the GPU function has no device step:\n%s", dg); return; }
    if (c->on_gpu[0] && !strstr(dg, c->on_gpu)) { snprintf(why, cap, "%s is not in the GPU function:\n%s", c->on_gpu, dg); return; }
    if (strstr(dc, "Gpu") || tn_function_device_steps(cpu->f) != 0) { snprintf(why, cap, "the CPU function runs on a device:\n%s", dc); return; }
    const char *end = strstr(dg, "update of ");
    for (const char *line = dg; *line && (!end || line < end);) {
        const char *nl = strchr(line, '\n'), *p = line;
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        while (p < line + len && (*p == ' ' || *p == '|')) p++;
        size_t tok = 0;
        while (p + tok < line + len && p[tok] != '{' && p[tok] != ' ' && p[tok] != '[') tok++;
        for (size_t k = 0; k < sizeof device_ops / sizeof device_ops[0]; k++)
            if (strlen(device_ops[k]) == tok && strncmp(p, device_ops[k], tok) == 0) {
                snprintf(why, cap, "%.*s runs on the host in the GPU function:\n%s", (int)len, line, dg);
                return;
            }
        line += len + (nl ? 1 : 0);
    }
}

static const char *shape_of(int nd, const int64_t *sh, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < nd && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)sh[d]);
    if (n < cap) snprintf(buf + n, cap - n, nd == 1 ? ",)" : ")");
    return buf;
}

/* Compares one output of both functions; "" when they agree, else why. */
static void compare(const tn_array *gpu, const tn_array *cpu, bool exact, char *why, size_t cap, double *worst) {
    char s1[128], s2[128];
    why[0] = 0;
    if (!gpu || !cpu) { snprintf(why, cap, "missing output"); return; }
    if (gpu->dtype != cpu->dtype || gpu->ndim != cpu->ndim || memcmp(gpu->shape, cpu->shape, sizeof(int64_t) * (size_t)cpu->ndim)) {
        snprintf(why, cap, "gpu %s %s, cpu %s %s", tn_dtype_name(gpu->dtype), shape_of(gpu->ndim, gpu->shape, s1, sizeof s1), tn_dtype_name(cpu->dtype),
                 shape_of(cpu->ndim, cpu->shape, s2, sizeof s2));
        return;
    }
    tn_array *gh = tn_array_to_host(gpu), *gc = gh ? tn_array_copy(gh) : NULL, *cc = tn_array_copy(cpu);
    tn_array *g64 = gc ? tn_array_astype(gc, TN_F64) : NULL, *c64 = tn_array_astype(cpu, TN_F64);
    if (!g64 || !c64 || !cc) { snprintf(why, cap, "copying the outputs: %.200s", tn_last_error()); goto out; }
    int64_t n = tn_array_size(cpu);
    const double *a = (const double *)g64->data, *b = (const double *)c64->data;
    bool is_float = tn_dtype_is_float(cpu->dtype);
    if (exact || !is_float) {
        size_t es = tn_dtype_size(cpu->dtype);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            bool same = (is_float && isnan(a[i]) && isnan(b[i])) || !memcmp((const char *)gc->data + i * (int64_t)es, (const char *)cc->data + i * (int64_t)es, es);
            if (!same && bad++ == 0) first = i;
        }
        if (bad) snprintf(why, cap, "%lld of %lld elements differ (exact rule); first at flat index %lld: gpu %.17g, cpu %.17g", (long long)bad,
                          (long long)n, (long long)first, a[first], b[first]);
        goto out;
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(b[i]) || !isfinite(a[i])) {
            if (!((isnan(a[i]) && isnan(b[i])) || a[i] == b[i])) {
                snprintf(why, cap, "flat index %lld: gpu %.17g, cpu %.17g (non-finite values must agree)", (long long)i, a[i], b[i]);
                goto out;
            }
            continue;
        }
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    double e = den > 0 ? num / den : num, lim = nmse_limit(cpu->dtype);
    if (e > *worst) *worst = e;
    if (!(e <= lim)) {
        int64_t k = 0;
        for (int64_t i = 1; i < n; i++)
            if (isfinite(a[i]) && isfinite(b[i]) && fabs(a[i] - b[i]) > fabs(a[k] - b[k])) k = i;
        snprintf(why, cap, "NMSE %.3g > %.0e; largest difference at flat index %lld: gpu %.17g, cpu %.17g", e, lim, (long long)k, a[k], b[k]);
    }
out:
    tn_array_free(gh); tn_array_free(gc); tn_array_free(cc); tn_array_free(g64); tn_array_free(c64);
}

static void shapes_str(const op_case *c, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n_in && n < cap; i++) {
        char s[128];
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%s", i ? ", " : "", c->in[i].kind == IN_DATA ? "" : "indices ",
                              shape_of(c->in[i].ndim, c->in[i].shape, s, sizeof s));
    }
    if (c->n_in == 0) snprintf(buf, cap, "no inputs");
}

/* Runs case c for dtype t and layout lay; 1 when it matched, 0 when not, -1
   when the layout does not apply (no input it changes). */
static int run_op_case(const op_case *c, tn_dtype t, int lay, uint64_t seed, char *why, size_t cap, double *worst) {
    int max_nd = 0;
    for (int i = 0; i < c->n_in; i++) max_nd = c->in[i].ndim > max_nd ? c->in[i].ndim : max_nd;
    if (lay != OPL_CONTIG && (max_nd == 0 || (lay == OPL_TRANSPOSED && max_nd < 2))) return -1;
    if (lay == OPL_SLICED && (c->flags & OWN_SLICES)) return -1;
    tn_array *vals[3] = { 0 }, *keep[2][3] = { { 0 } };
    built gb, cb;
    char w[600] = "";
    int ok = 0;
    memset(&gb, 0, sizeof gb);
    memset(&cb, 0, sizeof cb);
    why[0] = 0;
    for (int i = 0; i < c->n_in; i++)
        if (!(vals[i] = make_values(c, i, t, seed + (uint64_t)i))) { snprintf(why, cap, "inputs: %.300s", tn_last_error()); goto out; }
    build_case(c, t, lay, vals, false, &gb, keep[0], w, sizeof w);
    if (!gb.f) { snprintf(why, cap, "%s", w); goto out; }
    build_case(c, t, lay, vals, true, &cb, keep[1], w, sizeof w);
    if (!cb.f) { snprintf(why, cap, "%s", w); goto out; }
    check_placement(c, &gb, &cb, w, sizeof w);
    if (w[0]) { snprintf(why, cap, "placement: %s", w); goto out; }
    ok = 1;
    for (int call = 0; call < 2 && ok; call++) {
        tn_array *rg[8] = { 0 }, *rc[8] = { 0 };
        if (tn_call(gb.f, gb.pass, rg) != TN_OK) { snprintf(why, cap, "call %d on the GPU: %.300s", call, tn_last_error()); ok = 0; }
        else if (tn_call(cb.f, cb.pass, rc) != TN_OK) { snprintf(why, cap, "call %d on the CPU: %.300s", call, tn_last_error()); ok = 0; }
        for (int j = 0; j < gb.n_out && ok; j++) {
            compare(rg[j], rc[j], c->rule == RULE_EXACT && j < gb.n_fwd, w, sizeof w, worst);
            if (w[0]) {
                if (j < gb.n_fwd) snprintf(why, cap, "call %d, output %d: %s", call, j, w);
                else snprintf(why, cap, "call %d, gradient wrt data input %d: %s", call, j - gb.n_fwd, w);
                ok = 0;
            }
        }
        for (int j = 0; j < 8; j++) { tn_array_free(rg[j]); tn_array_free(rc[j]); }
    }
out:
    built_free(&gb);
    built_free(&cb);
    for (int i = 0; i < 3; i++) { tn_array_free(vals[i]); tn_array_free(keep[0][i]); tn_array_free(keep[1][i]); }
    return ok;
}

TEST(test_op_cases_gpu_equals_cpu) {
    int n = 0, bad = 0, families = 0;
    double worst[TN_DTYPE_COUNT] = { 0 };
    for (int k = 0; k < N_CASES; k++) {
        const op_case *c = &op_cases[k];
        families++;
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            if (!(c->dtypes & DT(t))) continue;
            for (int lay = 0; lay < OPL_COUNT; lay++) {
                char why[20000], shp[256];
                int r = run_op_case(c, t, lay, 1000 * (uint64_t)k + 17 * (uint64_t)t, why, sizeof why, &worst[t]);
                if (r < 0) continue;
                n++;
                if (r == 0 && ++bad <= 30) {
                    shapes_str(c, shp, sizeof shp);
                    CHECK(r == 1, "%s, %s, %s layout, inputs %s: %s", c->family, tn_dtype_name(t), opl_name[lay], shp, why);
                }
            }
        }
    }
    printf("  %d op cases (%d families x dtypes x layouts), %d mismatches\n", n, families, bad);
    printf("  largest NMSE: float16 %.2g, float32 %.2g, float64 %.2g (limits %.0e, %.0e, %.0e)\n", worst[TN_F16], worst[TN_F32], worst[TN_F64],
           nmse_limit(TN_F16), nmse_limit(TN_F32), nmse_limit(TN_F64));
    CHECK(bad == 0, "%d of %d op cases differ between the GPU and the CPU", bad, n);
}

/* The pooling cases again with the kernels' 64-bit index paths forced
   (tn_pool's and the tn_pool2w_<mode>l entries, otherwise reached only by
   inputs of 2^31 elements and more): the same bits as the CPU. */
TEST(test_pool_cases_wide_index) {
    int n = 0, bad = 0;
    double worst[TN_DTYPE_COUNT] = { 0 };
    tn__cuda_pool_wide_index(true);
    for (int k = 0; k < N_CASES; k++) {
        const op_case *c = &op_cases[k];
        if (strcmp(c->on_gpu, "GpuPool{")) continue;
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            if (!(c->dtypes & DT(t))) continue;
            for (int lay = 0; lay < OPL_COUNT; lay++) {
                char why[20000];
                int r = run_op_case(c, t, lay, 1000 * (uint64_t)k + 17 * (uint64_t)t, why, sizeof why, &worst[t]);
                if (r < 0) continue;
                n++;
                if (r == 0 && ++bad <= 10) CHECK(r == 1, "%s, %s, %s layout, 64-bit indices: %s", c->family, tn_dtype_name(t), opl_name[lay], why);
            }
        }
    }
    tn__cuda_pool_wide_index(false);
    printf("  %d pooling cases with 64-bit indices, %d mismatches\n", n, bad);
    CHECK(n >= 12 * 3 && bad == 0, "%d of %d pooling cases with 64-bit indices differ", bad, n);
}

int main(void) {
    tn_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (tn_parse_flags(getenv("TENSOR_FLAGS"), &cfg) != TN_OK) printf("TENSOR_FLAGS: %s\n", tn_last_error());
    cfg.device = TN_DEVICE_CUDA;
    cfg.floatX = TN_F32;
    cfg.allow_gc = true;
    tn_init(&cfg);
    if (tn_cuda_init() != TN_OK) th_skip_all("no usable GPU: %s", tn_cuda_status());
    printf("%s\n", tn_cuda_status());
    TH_RUN(test_op_cases_gpu_equals_cpu);
    TH_RUN(test_pool_cases_wide_index);
    tn_shutdown();
    TH_END();
}
