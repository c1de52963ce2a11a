/* tensor_ops.h - v0.1 - the op catalogue of tensor.h - MIT licence (see tensor.h)

   Included by tensor.h; never included on its own. Every op is defined here:
   its parameters, its type rule, its CPU kernel, its debugprint name, and the
   public constructor that records it in a graph. Elementwise ops come from one
   table, TN_EW_OPS, whose C expressions are compiled into the CPU kernels and
   pasted, as text, into the CUDA kernels tensor_cuda.h generates.
*/
#ifndef TENSOR_OPS_H
#define TENSOR_OPS_H

#ifndef TENSOR_H
#error "include tensor.h, which includes tensor_ops.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* >>ew_table ------------------------------------------------------------- */
/* Elementwise kinds: how inputs are promoted and what dtype comes out.
     ARITH  inputs promoted to one dtype; output of that dtype (ints allowed)
     FLOAT  as ARITH, but ints are first cast to float64; output float
     CMP    inputs promoted to one dtype; output bool
     LOGIC  inputs cast to bool; output bool
     WHERE  (bool, T, T) -> T
     CAST   one input; output dtype p.i[0]                                  */
#define TN_EWK_ARITH 1
#define TN_EWK_FLOAT 2
#define TN_EWK_CMP   3
#define TN_EWK_LOGIC 4
#define TN_EWK_WHERE 5
#define TN_EWK_CAST  6

/* Expressions see the registers a, b, c of compute type TN_T (float for
   float16/float32, double for float64, int64_t for ints and bool), and call
   float functions as TN_F(exp)(a), which names expf or exp for TN_T. The int
   column is used for int and bool operands; it must never overflow in C's
   sense (unsigned arithmetic wraps like NumPy) nor divide by zero.
   X(ENUM, name, arity, kind, float_expr, int_expr)                          */
#define TN__U(x) ((uint64_t)(x))
#define TN__S(x) ((int64_t)(x))
#define TN_EW_OPS(X) \
    X(IDENTITY,   identity,   1, TN_EWK_ARITH, (a), (a)) \
    X(ADD,        add,        2, TN_EWK_ARITH, (a) + (b), TN__S(TN__U(a) + TN__U(b))) \
    X(SUB,        sub,        2, TN_EWK_ARITH, (a) - (b), TN__S(TN__U(a) - TN__U(b))) \
    X(MUL,        mul,        2, TN_EWK_ARITH, (a) * (b), TN__S(TN__U(a) * TN__U(b))) \
    X(TRUE_DIV,   true_div,   2, TN_EWK_FLOAT, (a) / (b), 0) \
    X(INT_DIV,    int_div,    2, TN_EWK_ARITH, TN_F(floor)((a) / (b)), tn__ifloordiv(a, b)) \
    X(MOD,        mod,        2, TN_EWK_ARITH, (TN_F(fmod)(a, b) != 0 && (((b) < 0) != (TN_F(fmod)(a, b) < 0)) ? TN_F(fmod)(a, b) + (b) : TN_F(fmod)(a, b)), tn__imod(a, b)) \
    X(POW,        pow,        2, TN_EWK_ARITH, TN_F(pow)(a, b), tn__ipow(a, b)) \
    X(NEG,        neg,        1, TN_EWK_ARITH, -(a), TN__S(0 - TN__U(a))) \
    X(ABS,        abs,        1, TN_EWK_ARITH, TN_F(fabs)(a), ((a) < 0 ? TN__S(0 - TN__U(a)) : (a))) \
    X(SIGN,       sign,       1, TN_EWK_ARITH, ((a) != (a) ? (a) : (TN_T)((a) > 0) - (TN_T)((a) < 0)), (TN_T)((a) > 0) - (TN_T)((a) < 0)) \
    X(EXP,        exp,        1, TN_EWK_FLOAT, TN_F(exp)(a), 0) \
    X(EXP2,       exp2,       1, TN_EWK_FLOAT, TN_F(exp2)(a), 0) \
    X(EXPM1,      expm1,      1, TN_EWK_FLOAT, TN_F(expm1)(a), 0) \
    X(LOG,        log,        1, TN_EWK_FLOAT, TN_F(log)(a), 0) \
    X(LOG2,       log2,       1, TN_EWK_FLOAT, TN_F(log2)(a), 0) \
    X(LOG1P,      log1p,      1, TN_EWK_FLOAT, TN_F(log1p)(a), 0) \
    X(SQRT,       sqrt,       1, TN_EWK_FLOAT, TN_F(sqrt)(a), 0) \
    X(RSQRT,      rsqrt,      1, TN_EWK_FLOAT, (TN_T)1 / TN_F(sqrt)(a), 0) \
    X(SQR,        sqr,        1, TN_EWK_ARITH, (a) * (a), TN__S(TN__U(a) * TN__U(a))) \
    X(RECIPROCAL, reciprocal, 1, TN_EWK_FLOAT, (TN_T)1 / (a), 0) \
    X(SIN,        sin,        1, TN_EWK_FLOAT, TN_F(sin)(a), 0) \
    X(COS,        cos,        1, TN_EWK_FLOAT, TN_F(cos)(a), 0) \
    X(TAN,        tan,        1, TN_EWK_FLOAT, TN_F(tan)(a), 0) \
    X(TANH,       tanh,       1, TN_EWK_FLOAT, TN_F(tanh)(a), 0) \
    X(SIGMOID,    sigmoid,    1, TN_EWK_FLOAT, ((a) >= 0 ? (TN_T)1 / ((TN_T)1 + TN_F(exp)(-(a))) : TN_F(exp)(a) / ((TN_T)1 + TN_F(exp)(a))), 0) \
    X(SOFTPLUS,   softplus,   1, TN_EWK_FLOAT, ((a) > 0 ? (a) + TN_F(log1p)(TN_F(exp)(-(a))) : TN_F(log1p)(TN_F(exp)(a))), 0) \
    X(ERF,        erf,        1, TN_EWK_FLOAT, TN_F(erf)(a), 0) \
    X(FLOOR,      floor,      1, TN_EWK_ARITH, TN_F(floor)(a), (a)) \
    X(CEIL,       ceil,       1, TN_EWK_ARITH, TN_F(ceil)(a), (a)) \
    X(ROUND,      round,      1, TN_EWK_ARITH, TN_F(rint)(a), (a)) \
    X(MINIMUM,    minimum,    2, TN_EWK_ARITH, ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b)), ((a) < (b) ? (a) : (b))) \
    X(MAXIMUM,    maximum,    2, TN_EWK_ARITH, ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b)), ((a) > (b) ? (a) : (b))) \
    X(CLIP,       clip,       3, TN_EWK_ARITH, ((a) != (a) ? (a) : (a) < (b) ? (b) : (a) > (c) ? (c) : (a)), ((a) < (b) ? (b) : (a) > (c) ? (c) : (a))) \
    X(LT,         lt,         2, TN_EWK_CMP,   (TN_I)((a) < (b)), (TN_I)((a) < (b))) \
    X(LE,         le,         2, TN_EWK_CMP,   (TN_I)((a) <= (b)), (TN_I)((a) <= (b))) \
    X(GT,         gt,         2, TN_EWK_CMP,   (TN_I)((a) > (b)), (TN_I)((a) > (b))) \
    X(GE,         ge,         2, TN_EWK_CMP,   (TN_I)((a) >= (b)), (TN_I)((a) >= (b))) \
    X(EQ,         eq,         2, TN_EWK_CMP,   (TN_I)((a) == (b)), (TN_I)((a) == (b))) \
    X(NEQ,        neq,        2, TN_EWK_CMP,   (TN_I)((a) != (b)), (TN_I)((a) != (b))) \
    X(AND,        and,        2, TN_EWK_LOGIC, 0, (TN_I)((a) && (b))) \
    X(OR,         or,         2, TN_EWK_LOGIC, 0, (TN_I)((a) || (b))) \
    X(XOR,        xor,        2, TN_EWK_LOGIC, 0, (TN_I)(!(a) != !(b))) \
    X(NOT,        not,        1, TN_EWK_LOGIC, 0, (TN_I)(!(a))) \
    X(WHERE,      where,      3, TN_EWK_WHERE, ((a) ? (b) : (c)), ((a) ? (b) : (c))) \
    X(CAST,       cast,       1, TN_EWK_CAST,  (a), (a))

/* Scalar helpers the int column calls: compiled here and, as text, into every
   generated CUDA kernel (QUAL is "static inline" or "__device__ inline"). */
#define TN__SCALAR_HELPERS(QUAL) \
    QUAL int64_t tn__ifloordiv(int64_t a, int64_t b) { \
        if (b == 0) return 0; \
        if (b == -1) return (int64_t)(0 - (uint64_t)a); \
        int64_t q = a / b; \
        if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; \
        return q; } \
    QUAL int64_t tn__imod(int64_t a, int64_t b) { \
        if (b == 0 || b == -1) return 0; \
        int64_t r = a % b; \
        if (r != 0 && ((r < 0) != (b < 0))) r += b; \
        return r; } \
    QUAL int64_t tn__ipow(int64_t a, int64_t b) { \
        if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0; \
        uint64_t r = 1, x = (uint64_t)a; \
        while (b) { if (b & 1) r *= x; x *= x; b >>= 1; } \
        return (int64_t)r; }
#define TN__STRINGIFY(...) #__VA_ARGS__
#define TN__XSTRINGIFY(...) TN__STRINGIFY(__VA_ARGS__)

/* >>op_enum -------------------------------------------------------------- */
/* Non-elementwise ops and the i[]/f[] of their tn_params.                   */
#define TN_OTHER_OPS(X) \
    X(INPUT)          /* leaf: a symbolic input */ \
    X(CONSTANT)       /* leaf: value */ \
    X(SHARED)         /* leaf: value, replaced by updates */ \
    X(PROJ)           /* output i[0] of a multi-output node in[0] */ \
    X(COMPOSITE)      /* fused elementwise: ext = tn_ew_program; n_out outputs */ \
    X(SUM)            /* reductions: i[0] axis bit mask, i[1] keepdims; ext: optional prologue program */ \
    X(PROD) X(MEAN) X(MAX) X(MIN) X(ARGMAX) X(ARGMIN) X(ALL) X(ANY) \
    X(LOGSUMEXP)      /* as reductions */ \
    X(SOFTMAX)        /* i[0] axis */ \
    X(LOG_SOFTMAX)    /* i[0] axis */ \
    X(DOT)            /* matmul semantics: 1-d dot, matrix-vector, matrix, batched with broadcast batch dims */ \
    X(GEMM)           /* in: C, A, B: f[0]*A@B + f[1]*C; C broadcasts to the product */ \
    X(GEMV)           /* in: y, A, x: f[0]*A@x + f[1]*y */ \
    X(OUTER)          /* in: a, b vectors */ \
    X(RESHAPE)        /* i[0..ndim) target shape, at most one -1; ndim in i[27] (TN_MAX_IPARAMS-1); copies for now (see src/ops_shape.c.h) */ \
    X(DIMSHUFFLE)     /* i[k] source axis of output dim k, or -1 for a new broadcastable dim ('x'); ndim in i[27]; view */ \
    X(SLICE)          /* i[3d], i[3d+1], i[3d+2]: start, stop, step of dim d; TN_NONE where omitted; view */ \
    X(BROADCAST_TO)   /* i[0..ndim) target shape; ndim in i[27]; view */ \
    X(FLATTEN)        /* i[0] outdim: keeps outdim-1 leading dims, flattens the rest */ \
    X(CONCATENATE)    /* variadic, i[0] axis */ \
    X(ALLOC)          /* in[0] value broadcast to i[0..ndim) (ndim in i[27]); with a second input `like` (tn_fill), to like's shape instead */ \
    X(EYE)            /* i[0] n, i[1] m, i[2] k (diagonal offset); dtype in i[26] */ \
    X(ARANGE)         /* f[0] start, f[1] stop, f[2] step; dtype in i[26] */ \
    X(CUSTOM)         /* user op: ext = tn_custom_op */ \
    X(GPU_FROM_HOST)  /* in[0] copied to the device (node->device); no params; Theano's GpuFromHost */ \
    X(HOST_FROM_GPU)  /* in[0] copied to the host; waits for the stream; Theano's HostFromGpu */ \
    X(SCAN)           /* a loop (src/scan.c.h): ext = the loop (step function, taps); no params. in: sequences, \
                         initial values, non_sequences; out: each output's stacked buffer (initial rows first), \
                         then each update's last value. ScanGrad (ext->bwd): in: the forward's inputs, stacked \
                         outputs and their gradients; out: the gradient of each forward input */

typedef enum tn_op {
    TN_OP_NONE = 0,
#define TN__X_EW_ENUM(E, n, ar, k, fe, ie) TN_OP_##E,
    TN_EW_OPS(TN__X_EW_ENUM)
#undef TN__X_EW_ENUM
#define TN__X_ENUM(E) TN_OP_##E,
    TN_OTHER_OPS(TN__X_ENUM)
#undef TN__X_ENUM
    TN_OP_COUNT
} tn_op;

#define TN_NONE INT64_MIN   /* an omitted slice bound */

typedef enum tn_op_kind {
    TN_OPK_LEAF = 1,
    TN_OPK_ELEMWISE,       /* one row of TN_EW_OPS */
    TN_OPK_COMPOSITE,      /* fused elementwise program */
    TN_OPK_REDUCE,
    TN_OPK_LINALG,
    TN_OPK_VIEW,           /* output aliases in[0]: no kernel work */
    TN_OPK_SHAPE,          /* computes a new array from shapes or copies */
    TN_OPK_TRANSFER,       /* host <-> device copies (tensor_cuda.h) */
    TN_OPK_OTHER
} tn_op_kind;

/* >>ew_program ----------------------------------------------------------- */
/* A fused elementwise program. Registers 0..n_in-1 hold the inputs (loaded
   from their storage dtype); instruction k writes register n_in+k. The CPU
   runs it over blocks of elements; tensor_cuda.h turns it into one kernel. */
typedef struct tn_ew_instr {
    int16_t op;            /* an elementwise tn_op, or TN_OP_CONSTANT for an immediate */
    int8_t dtype;          /* result dtype (its compute type follows) */
    int8_t in_dtype;       /* dtype the operands are read as (WHERE: of b and c) */
    int32_t a, b, c;       /* operand registers (-1 unused) */
    double imm;            /* TN_OP_CONSTANT: the value */
} tn_ew_instr;

typedef struct tn_ew_program {
    int n_in;
    tn_dtype *in_dtype;    /* storage dtype of each input */
    int n_instr;
    tn_ew_instr *instr;
    int n_out;
    int32_t *out_reg;      /* register each output stores */
    tn_dtype *out_dtype;   /* storage dtype of each output */
} tn_ew_program;

/* >>op_def --------------------------------------------------------------- */
typedef struct tn_op_def {
    const char *name;      /* "exp", "Sum", "Dot", ... */
    tn_op_kind kind;
    int arity;             /* -1: variadic */
    /* Type rule: from the inputs' types (dims -1 where unknown at build time)
       and the node's params, the outputs' types. Used at build time and again
       at call time with every dim known; errors name the op and shapes. */
    tn_result (*infer)(const tn_var *node, const tn_type *in, tn_type *out);
    /* CPU kernel: inputs and preallocated outputs of the inferred types.
       For TN_OPK_VIEW ops it points out[0] into in[0] instead (no copy). */
    tn_result (*cpu)(const tn_var *node, tn_array *const *in, tn_array *const *out);
    /* debugprint label, e.g. "Elemwise{exp,no_inplace}", "Sum{axis=[0]}" */
    void (*label)(const tn_var *node, char *buf, size_t cap);
} tn_op_def;

typedef struct tn_ew_info {
    const char *name;
    int arity;
    int kind;              /* TN_EWK_* */
    const char *fexpr;     /* the table's expressions, as text (for code generators) */
    const char *iexpr;
} tn_ew_info;

TN_API const tn_op_def *tn__op_def(int op);
TN_API const tn_ew_info *tn__ew_info(int op);        /* NULL for non-elementwise ops */
TN_API const char *tn__scalar_helpers_source(void);  /* TN__SCALAR_HELPERS as text */
TN_API tn_op_kind tn__op_kind(int op);

/* CPU elementwise engine: runs `prog` over the broadcast of the inputs into
   the outputs (all outputs have the broadcast shape). */
TN_API tn_result tn__cpu_ew_run(const tn_ew_program *prog, tn_array *const *in, tn_array *const *out);
/* The one-instruction program of an elementwise node (built in its graph's arena). */
TN_API tn_ew_program *tn__ew_program_of(tn_var *node);

/* >>constructors --------------------------------------------------------- */
/* Each records one node (or a few) and returns it, or NULL with the error set
   (tn_last_error); a NULL argument, as from an earlier failure, gives NULL. */

#define TN__X_DECL1(E, n, ar, k, fe, ie) TN__DECL_##ar(n)
#define TN__DECL_1(n) TN_API tn_var *tn_##n(tn_var *a);
#define TN__DECL_2(n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b);
#define TN__DECL_3(n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b, tn_var *c);
/* tn_identity, tn_add, ..., tn_where(cond, a, b); tn_cast takes a dtype: */
#define TN__X_DECL(E, n, ar, k, fe, ie) TN__X_DECL_IF_##k(n, ar)
#define TN__X_DECL_IF_TN_EWK_ARITH(n, ar) TN__DECL_##ar(n)
#define TN__X_DECL_IF_TN_EWK_FLOAT(n, ar) TN__DECL_##ar(n)
#define TN__X_DECL_IF_TN_EWK_CMP(n, ar)   TN__DECL_##ar(n)
#define TN__X_DECL_IF_TN_EWK_LOGIC(n, ar) TN__DECL_##ar(n)
#define TN__X_DECL_IF_TN_EWK_WHERE(n, ar) TN__DECL_##ar(n)
#define TN__X_DECL_IF_TN_EWK_CAST(n, ar)
TN_EW_OPS(TN__X_DECL)
TN_API tn_var *tn_cast(tn_var *a, tn_dtype t);
TN_API tn_var *tn_div(tn_var *a, tn_var *b);             /* true_div */
TN_API tn_var *tn_lit(tn_var *like, double value);       /* tn_scalar_const in like's graph */
TN_API tn_var *tn_switch(tn_var *cond, tn_var *a, tn_var *b); /* Theano's name for where */

/* Reductions: axes NULL means every axis; negative axes count from the end. */
TN_API tn_var *tn_sum(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_prod(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_mean(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_max(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_min(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_all(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_any(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_logsumexp(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_argmax(tn_var *x, int axis, bool keepdims);  /* first index of the max; int64 */
TN_API tn_var *tn_argmin(tn_var *x, int axis, bool keepdims);
TN_API tn_var *tn_softmax(tn_var *x, int axis);
TN_API tn_var *tn_log_softmax(tn_var *x, int axis);

/* Linear algebra. */
TN_API tn_var *tn_dot(tn_var *a, tn_var *b);     /* NumPy matmul rules; 1-d . 1-d is a scalar */
TN_API tn_var *tn_gemm(tn_var *c, double alpha, tn_var *a, tn_var *b, double beta);  /* alpha*a@b + beta*c */
TN_API tn_var *tn_gemv(tn_var *y, double alpha, tn_var *a, tn_var *x, double beta);  /* alpha*a@x + beta*y */
TN_API tn_var *tn_outer(tn_var *a, tn_var *b);

/* Shapes. */
TN_API tn_var *tn_reshape(tn_var *x, int ndim, const int64_t *shape);   /* one -1 allowed */
TN_API tn_var *tn_dimshuffle(tn_var *x, int ndim, const int *pattern);  /* -1 for 'x' */
TN_API tn_var *tn_transpose(tn_var *x, const int *perm);                /* NULL: reverse the axes */
TN_API tn_var *tn_slice(tn_var *x, int axis, int64_t start, int64_t stop, int64_t step); /* TN_NONE: omitted */
TN_API tn_var *tn_flatten(tn_var *x, int outdim);
TN_API tn_var *tn_broadcast_to(tn_var *x, int ndim, const int64_t *shape);
TN_API tn_var *tn_concatenate(int n, tn_var *const *xs, int axis);
TN_API tn_var *tn_stack(int n, tn_var *const *xs, int axis);
TN_API tn_var *tn_alloc(tn_var *value, int ndim, const int64_t *shape);  /* value broadcast to shape */
TN_API tn_var *tn_fill(tn_var *like, tn_var *value);                    /* value broadcast to like's shape */
TN_API tn_var *tn_eye(tn_graph *g, tn_dtype t, int64_t n, int64_t m, int64_t k);
TN_API tn_var *tn_arange(tn_graph *g, tn_dtype t, double start, double stop, double step);

/* Transfers (src/transfer.c.h). A function output that is tn_gpu_from_host(x)
   is returned as a device array (device >= 0) when the CUDA back end runs the
   function; on the CPU both are plain copies. The placement pass inserts and
   cancels these itself: users need them only to ask for a device result. */
TN_API tn_var *tn_gpu_from_host(tn_var *x);
TN_API tn_var *tn_host_from_gpu(tn_var *x);

/* >>grad ----------------------------------------------------------------- */
/* Symbolic differentiation (src/grad.c.h). Gradients are ordinary nodes of
   the cost's graph (arena-owned): compile them with tn_function like any
   other output, or differentiate them again. Gradients flow through float
   values only: integer and boolean values (comparisons, argmax, casts to int,
   floor/round/sign) pass zero. max/min and maximum/minimum give the whole
   gradient to every position equal to the result (ties are not split). */
typedef enum tn_disconnected {
    TN_DISCONNECTED_RAISE = 0,   /* TN_ERR_DISCONNECTED naming the variable (default, as Theano) */
    TN_DISCONNECTED_WARN,        /* a warning (tn_set_log); the gradient is zeros */
    TN_DISCONNECTED_IGNORE       /* the gradient is zeros */
} tn_disconnected;

typedef struct tn_grad_options {
    int n_consider_constant;
    tn_var *const *consider_constant;  /* not backpropagated through (may still be wrt) */
    tn_disconnected disconnected_inputs;
    int n_known_grads;                 /* start from given gradients of intermediate */
    tn_var *const *known_vars;         /* variables: d cost/d known_vars[i] = known_grads[i] */
    tn_var *const *known_grads;        /* (same rank); cost may then be NULL */
} tn_grad_options;

/* Fills grads[0..n) with d cost / d wrt[i]; cost is a 0-d float (or NULL with
   known_grads); wrt are float variables of cost's graph. opt NULL: defaults.
   On error every grads[i] is NULL. */
TN_API tn_result tn_grad(tn_var *cost, int n, tn_var *const *wrt, tn_var **grads, const tn_grad_options *opt);
TN_API tn_var *tn_grad1(tn_var *cost, tn_var *wrt);      /* one gradient, default options; NULL on error */
TN_API tn_var *tn_stop_gradient(tn_var *x);              /* x, through which no gradient flows */
/* Forward mode: the Jacobian of f with respect to wrt[] times eval_points[]
   (each of its wrt's shape), a variable of f's shape. Elementwise, dot/gemm/
   gemv/outer, reductions, softmax and shape ops; TN_ERR_UNSUPPORTED otherwise. */
TN_API tn_var *tn_rop(tn_var *f, int n, tn_var *const *wrt, tn_var *const *eval_points);

/* Checks tn_grad against central finite differences in float64, as Theano's
   verify_grad: build(g, inputs, user) returns an expression of float64 inputs
   (any shape: a non-scalar output is projected on a seeded random array). */
typedef tn_var *(*tn_grad_builder)(tn_graph *g, tn_var *const *inputs, void *user);
typedef struct tn_verify_grad_desc {
    tn_grad_builder build;
    void *user;
    int n_inputs;
    tn_array *const *points;    /* the point: one array per input (converted to float64) */
    uint64_t seed;              /* of the random projection */
    double eps;                 /* finite-difference step (0: 1e-6) */
    double abs_tol, rel_tol;    /* an element fails when both are exceeded (0: 1e-5, 1e-4) */
    bool static_shapes;         /* inputs get the points' shapes at build time (else -1, 1s broadcast) */
    tn_mode mode;
} tn_verify_grad_desc;
typedef struct tn_verify_grad_report {
    int input;                  /* worst element: input index, its index in that input */
    int ndim;
    int64_t index[TN_MAX_DIMS];
    double symbolic, numeric, abs_err, rel_err;
} tn_verify_grad_report;
/* TN_OK when every element agrees; TN_ERR_INVALID naming the worst one when
   not; other errors from building or running. report may be NULL. */
TN_API tn_result tn_verify_grad(const tn_verify_grad_desc *desc, tn_verify_grad_report *report);

/* >>custom --------------------------------------------------------------- */
/* A user op (src/custom.c.h): a type rule, a CPU function and optionally CUDA
   C source, used in a graph like any op (Theano's custom Op, the seed's
   multiply_them and GpuEye). tn_custom copies the description and its strings
   into the graph; `user` must outlive the graph and its functions. Callbacks
   return TN_OK, or an error code and a reason written into why[why_cap]; the
   error the user sees names the op. */
typedef struct tn_custom_op tn_custom_op;
struct tn_custom_op {
    const char *name;          /* in messages, debugprint, profiles */
    int n_inputs;              /* -1: any number */
    int n_outputs;             /* 0 means 1 */
    /* Type rule: out[0..n_outputs) from in[] (dims -1 where unknown at build
       time; every dim is known at call time). Called at both times. */
    tn_result (*infer)(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t why_cap);
    /* CPU function: host arrays, inputs contiguous, outputs preallocated and
       contiguous. NULL: the op has no CPU fallback. */
    tn_result (*cpu)(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t why_cap);
    /* CUDA C source defining the extern "C" __global__ kernel cuda_kernel,
       called with the inputs' then the outputs' device pointers, then
       long long n (out[0]'s element count). NULL: CPU only. */
    const char *cuda_source;
    const char *cuda_kernel;
    /* Launch geometry; NULL: a 1-d grid of 256-thread blocks over n. */
    void (*cuda_geometry)(const tn_custom_op *op, tn_array *const *in, tn_array *const *out,
                          unsigned grid[3], unsigned block[3]);
    void *user;
};
/* Records the op applied to in[0..n); g may be NULL when n > 0. A one-output
   op's variable; NULL with the error set on failure (a type rule that fails
   reports "tn_custom: op 'name': ..."). */
TN_API tn_var *tn_custom(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in);
/* Several outputs: fills outs[op->n_outputs]. */
TN_API tn_result tn_custom_multi(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in, tn_var **outs);
/* The description a custom node carries (NULL for other nodes). */
TN_API const tn_custom_op *tn_custom_of(const tn_var *node);

/* >>scan ----------------------------------------------------------------- */
/* Loops inside the graph, as Theano's scan. The step callback builds one
   step from symbolic slices, once; the step is compiled with tn_function and
   run by one Scan node. Taps: a sequence tap a reads u(t+a) (taps {-4, 0}:
   u(t-4) and u(t), and the loop has len(u)-4 steps); an output tap -j reads
   x(t-j) (negative only). Variables of the graph the step reads without
   receiving them (a shared weight, an outer expression) are passed in as
   non_sequences automatically; step expressions that depend only on
   non_sequences are hoisted out of the loop. */
typedef struct tn_scan_seq {
    tn_var *var;              /* iterated over dim 0 */
    int n_taps;               /* 0: the single tap {0} */
    const int *taps;
} tn_scan_seq;
typedef struct tn_scan_out {
    tn_var *init;             /* NULL: the output is not fed back (no taps) */
    int n_taps;               /* 0 (with init): the single tap {-1} */
    const int *taps;          /* negative; with taps other than {-1}, init has a leading time dim of
                                 at least max(-tap) rows (its last rows are used: x(-max), ..., x(-1)) */
} tn_scan_out;
typedef struct tn_scan_step {
    tn_graph *g;              /* build the step here */
    tn_var *const *const *seq;   /* seq[i][j]: sequence i at its tap j */
    tn_var *const *const *out;   /* out[k][j]: output k at its tap j (NULL row when it has no init) */
    tn_var *const *non_seq;      /* non_seq[i] */
    int n_args;
    tn_var *const *args;      /* all of the above, flat, in Theano's order */
    tn_var **outputs;         /* the step fills outputs[k] for every output */
    tn_var **updates;         /* may fill updates[i]: the new value of non_sequence i (a shared variable) */
} tn_scan_step;
typedef tn_result (*tn_scan_fn)(tn_scan_step *s, void *user);
typedef struct tn_scan_desc {
    tn_scan_fn step;
    void *user;
    int n_sequences;
    const tn_scan_seq *sequences;
    int n_outputs;
    const tn_scan_out *outputs;
    int n_non_sequences;
    tn_var *const *non_sequences;
    bool has_n_steps;         /* false: the sequences' length (then every sequence must give the same) */
    int64_t n_steps;          /* with has_n_steps: steps to run (sequences must be long enough) */
    bool go_backwards;        /* sequences are read from the end; outputs are stacked in the order computed */
    int64_t truncate_gradient;/* > 0: back-propagate through the last that many steps only; 0: all */
    tn_graph *graph;          /* needed only when no sequence, init or non_sequence names the graph */
    const char *name;         /* for debugprint and messages */
} tn_scan_desc;
/* Builds the loop. outputs[n_outputs]: each output stacked over the steps
   (T rows); updates (room for n_non_sequences, may be NULL when the step
   makes none) and *n_updates: pass them to tn_function. */
TN_API tn_result tn_scan(const tn_scan_desc *desc, tn_var **outputs, tn_update *updates, int *n_updates);
/* Prints v like tn_debugprint, then the inner graph of every scan it reaches, indented. */
TN_API tn_result tn_scan_debugprint(const tn_var *v, FILE *out);
/* Frees the compiled steps of g's scans (tn_graph_free should call it; see src/scan.c.h). */
TN_API void tn__scan_release_graph(tn_graph *g);

#ifdef __cplusplus
}
#endif
#endif /* TENSOR_OPS_H */
