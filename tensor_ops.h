/* tensor_ops.h - v0.1 - the op catalogue of tensor.h - MIT licence (see tensor.h)

   Included by tensor.h; never included on its own. An op is one definition:
   its row of the op table (tn_op_def: name, kind, arity, type rule, CPU
   kernel, debugprint label, vjp, jvp and flags), written in its family's
   section here next to the code it names, its params' accessors and its
   public constructor. The rows are listed by the master table, tn__op_list
   (tensor.h, >>ops_table), which is pinned to TN_OP_COUNT at compile time and
   checked row by row when it is filled (first use). Elementwise ops come from
   one table, TN_EW_OPS, whose C expressions are compiled into the CPU kernels
   and pasted, as text, into the CUDA kernels tensor_cuda.h generates, and
   whose derivative column gives their gradients.

   Adding an elementwise op: one row of TN_EW_OPS (>>ew_table; anywhere before
   WHERE, CAST stays last): enum name, name, arity, kind, float expression, int
   expression, derivative (TN_DERIV(...), or TN_DISCRETE). That row is the
   whole op: its enum value, its constructor tn_<name> (declared and defined
   from the table), its CPU kernels, its CUDA code, its label, its vjp and jvp
   and its row of the op table follow from it. Then put it in the op tests:
   its reference and a case (with an input domain) in tests/test_ew.c, edge
   values there when it has special ones (NumPy's own answers, where they are
   subtle, in tests/test_numerics.c), a verify_grad case in
   tests/test_grad.c, and a use in tests/test_rewrite_random.c;
   tests/test_nvrtc.c, tests/test_cuda.c and tests/gpu/ew_programs.h take
   every row of the table by themselves.

   Adding another op:
     1. its name in TN_OTHER_OPS (>>op_enum), after LOGSUMEXP (the reductions
        SUM..LOGSUMEXP are a range the CUDA back end uses);
     2. its params: accessors in >>params saying where each value lives in
        tn_params (code never reads p.i[] or p.f[] itself);
     3. its constructor's declaration (>>constructors);
     4. in the implementation, its family's section (or a new one, as
        >>ops_cumulative): the type rule, the CPU kernel, the label, the
        constructor (errors name the constructor, the variable and its shape),
        the vjp (or the TN_OPF_DISCRETE flag: no gradient) and the jvp (or the
        TN_OPF_LINEAR flag: the op applied to the tangent; or none: tn_rop
        refuses it), and its row in the section's rows macro (as >>cum_rows);
     5. a new section's rows macro goes into tn__op_list (tensor.h);
     6. the flags the passes read: TN_OPF_PROLOGUE (a reduction that takes a
        fused elementwise prologue), TN_OPF_INPLACE and TN_OPF_INPLACE_ACC
        (the inplace pass), TN_OPF_NO_KERNEL; a flagged op also joins its
        flag's list in tests/test_op_table.c;
     7. a GPU kernel: its functions and one row in tensor_cuda.h's tn__cuda_op_rows
        (supports, prepare, run, release; cumsum's is >>cuda_cumulative, its
        CUDA C written here next to the CPU loop, >>cum_cuda). Without a row
        the op runs on the CPU, and placement, assert_no_cpu_op and the
        profiler say so;
     8. tests: values against a float64 reference with edge values, on every
        dtype it takes and strided layouts; errors; tn_verify_grad; tn_rop;
        on the GPU, tests/test_cuda_func.c against the CPU.
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
     CAST   one input; output dtype tn__p_cast_dtype                        */
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

   The derivative column says how gradients pass through the op, and every
   row must have one (an X of six arguments does not compile):
     TN_DERIV(expr)  expr is g times d z / d in[i], built with the public
                     constructors from z (the node), i (which input: 0, 1, 2),
                     a, b, c (z's inputs, as variables) and g (z's gradient in
                     reverse mode, in[i]'s tangent in forward mode; any shape
                     that broadcasts against z). Literals: tn_lit(g, 2.0).
     TN_DISCRETE     the result is piecewise constant or not a float: no
                     gradient passes (the row gets the TN_OPF_DISCRETE flag).
   X(ENUM, name, arity, kind, float_expr, int_expr, derivative)              */
#define TN__U(x) ((uint64_t)(x))
#define TN__S(x) ((int64_t)(x))
/* NumPy's clip: minimum(maximum(x, lo), hi), so lo > hi gives hi. */
#define TN__CLIP(x, lo, hi) (((x) > (lo) ? (x) : (lo)) < (hi) ? ((x) > (lo) ? (x) : (lo)) : (hi))
/* mish(x) = x tanh(softplus(x)) = x P / (P + Q) with t = exp(-|x|):
   x >= 0: P = 1 + 2t, Q = 2t^2; x < 0: P = t^2 + 2t, Q = 2 (tanh of
   log(1 + e^x) written out). One exp and one division, every term
   positive (no cancellation): float32 at most 3.3 ulp from float64 (exp,
   log1p and tanh gave 3.6). */
#define TN__MISH_P(x, t) ((x) >= 0 ? (TN_T)1 + (TN_T)2 * (t) : (t) * (t) + (TN_T)2 * (t))
#define TN__MISH_Q(x, t) ((x) >= 0 ? (TN_T)2 * (t) * (t) : (TN_T)2)
#define TN_EW_OPS(X) \
    X(IDENTITY,   identity,   1, TN_EWK_ARITH, (a), (a), \
      TN_DERIV(g)) \
    X(ADD,        add,        2, TN_EWK_ARITH, (a) + (b), TN__S(TN__U(a) + TN__U(b)), \
      TN_DERIV(g)) \
    X(SUB,        sub,        2, TN_EWK_ARITH, (a) - (b), TN__S(TN__U(a) - TN__U(b)), \
      TN_DERIV(i == 0 ? g : tn_neg(g))) \
    X(MUL,        mul,        2, TN_EWK_ARITH, (a) * (b), TN__S(TN__U(a) * TN__U(b)), \
      TN_DERIV(tn_mul(g, i == 0 ? b : a))) \
    X(TRUE_DIV,   true_div,   2, TN_EWK_FLOAT, (a) / (b), 0, \
      TN_DERIV(i == 0 ? tn_div(g, b) : tn_neg(tn_div(tn_mul(g, z), b)))) \
    X(INT_DIV,    int_div,    2, TN_EWK_ARITH, TN_F(tn__floordiv)(a, b), tn__ifloordiv(a, b), \
      TN_DISCRETE) \
    X(MOD,        mod,        2, TN_EWK_ARITH, TN_F(tn__floormod)(a, b), tn__imod(a, b), \
      TN_DERIV(i == 0 ? g : tn_neg(tn_mul(g, tn_int_div(a, b))))) \
    X(POW,        pow,        2, TN_EWK_ARITH, TN_F(pow)(a, b), tn__ipow(a, b), \
      TN_DERIV(i == 0 ? tn_mul(g, tn_mul(b, tn_pow(a, tn_sub(b, tn_lit(g, 1.0))))) : tn_mul(g, tn_mul(z, tn_log(a))))) \
    X(NEG,        neg,        1, TN_EWK_ARITH, -(a), TN__S(0 - TN__U(a)), \
      TN_DERIV(tn_neg(g))) \
    X(ABS,        abs,        1, TN_EWK_ARITH, TN_F(fabs)(a), ((a) < 0 ? TN__S(0 - TN__U(a)) : (a)), \
      TN_DERIV(tn_mul(g, tn_sign(a)))) \
    X(SIGN,       sign,       1, TN_EWK_ARITH, ((a) != (a) ? (a) : (TN_T)((a) > 0) - (TN_T)((a) < 0)), (TN_T)((a) > 0) - (TN_T)((a) < 0), \
      TN_DISCRETE) \
    X(EXP,        exp,        1, TN_EWK_FLOAT, TN_F(exp)(a), 0, \
      TN_DERIV(tn_mul(g, z))) \
    X(EXP2,       exp2,       1, TN_EWK_FLOAT, TN_F(exp2)(a), 0, \
      TN_DERIV(tn_mul(g, tn_mul(z, tn_lit(g, 0.69314718055994530942))))) \
    X(EXPM1,      expm1,      1, TN_EWK_FLOAT, TN_F(expm1)(a), 0, \
      TN_DERIV(tn_mul(g, tn_add(z, tn_lit(g, 1.0))))) \
    X(LOG,        log,        1, TN_EWK_FLOAT, TN_F(log)(a), 0, \
      TN_DERIV(tn_div(g, a))) \
    X(LOG2,       log2,       1, TN_EWK_FLOAT, TN_F(log2)(a), 0, \
      TN_DERIV(tn_div(g, tn_mul(a, tn_lit(g, 0.69314718055994530942))))) \
    X(LOG1P,      log1p,      1, TN_EWK_FLOAT, TN_F(log1p)(a), 0, \
      TN_DERIV(tn_div(g, tn_add(a, tn_lit(g, 1.0))))) \
    X(SQRT,       sqrt,       1, TN_EWK_FLOAT, TN_F(sqrt)(a), 0, \
      TN_DERIV(tn_div(tn_mul(g, tn_lit(g, 0.5)), z))) \
    X(RSQRT,      rsqrt,      1, TN_EWK_FLOAT, (TN_T)1 / TN_F(sqrt)(a), 0, \
      TN_DERIV(tn_mul(g, tn_mul(tn_lit(g, -0.5), tn_div(z, a))))) \
    X(SQR,        sqr,        1, TN_EWK_ARITH, (a) * (a), TN__S(TN__U(a) * TN__U(a)), \
      TN_DERIV(tn_mul(g, tn_mul(a, tn_lit(g, 2.0))))) \
    X(RECIPROCAL, reciprocal, 1, TN_EWK_FLOAT, (TN_T)1 / (a), 0, \
      TN_DERIV(tn_neg(tn_mul(g, tn_sqr(z))))) \
    X(SIN,        sin,        1, TN_EWK_FLOAT, TN_F(sin)(a), 0, \
      TN_DERIV(tn_mul(g, tn_cos(a)))) \
    X(COS,        cos,        1, TN_EWK_FLOAT, TN_F(cos)(a), 0, \
      TN_DERIV(tn_neg(tn_mul(g, tn_sin(a))))) \
    X(TAN,        tan,        1, TN_EWK_FLOAT, TN_F(tan)(a), 0, \
      TN_DERIV(tn_mul(g, tn_add(tn_lit(g, 1.0), tn_sqr(z))))) \
    X(ASIN,       asin,       1, TN_EWK_FLOAT, TN_F(asin)(a), 0, \
      TN_DERIV(tn_mul(g, tn_rsqrt(tn_sub(tn_lit(g, 1.0), tn_sqr(a)))))) \
    X(ACOS,       acos,       1, TN_EWK_FLOAT, TN_F(acos)(a), 0, \
      TN_DERIV(tn_neg(tn_mul(g, tn_rsqrt(tn_sub(tn_lit(g, 1.0), tn_sqr(a))))))) \
    X(ATAN,       atan,       1, TN_EWK_FLOAT, TN_F(atan)(a), 0, \
      TN_DERIV(tn_div(g, tn_add(tn_lit(g, 1.0), tn_sqr(a))))) \
    X(SINH,       sinh,       1, TN_EWK_FLOAT, TN_F(sinh)(a), 0, \
      TN_DERIV(tn_mul(g, tn_cosh(a)))) \
    X(COSH,       cosh,       1, TN_EWK_FLOAT, TN_F(cosh)(a), 0, \
      TN_DERIV(tn_mul(g, tn_sinh(a)))) \
    X(TANH,       tanh,       1, TN_EWK_FLOAT, TN_F(tanh)(a), 0, \
      TN_DERIV(tn_mul(g, tn_sub(tn_lit(g, 1.0), tn_sqr(z))))) \
    X(ASINH,      asinh,      1, TN_EWK_FLOAT, TN_F(asinh)(a), 0, \
      TN_DERIV(tn_mul(g, tn_rsqrt(tn_add(tn_sqr(a), tn_lit(g, 1.0)))))) \
    X(ACOSH,      acosh,      1, TN_EWK_FLOAT, TN_F(acosh)(a), 0, \
      TN_DERIV(tn_mul(g, tn_rsqrt(tn_mul(tn_sub(a, tn_lit(g, 1.0)), tn_add(a, tn_lit(g, 1.0))))))) \
    X(ATANH,      atanh,      1, TN_EWK_FLOAT, TN_F(atanh)(a), 0, \
      TN_DERIV(tn_div(g, tn_sub(tn_lit(g, 1.0), tn_sqr(a))))) \
    X(SIGMOID,    sigmoid,    1, TN_EWK_FLOAT, ((a) >= 0 ? (TN_T)1 : TN_F(exp)(-TN_F(fabs)(a))) / ((TN_T)1 + TN_F(exp)(-TN_F(fabs)(a))), 0, \
      TN_DERIV(tn_mul(g, tn_mul(z, tn_sub(tn_lit(g, 1.0), z))))) \
    X(SOFTPLUS,   softplus,   1, TN_EWK_FLOAT, ((a) > 0 ? (a) : (TN_T)0) + TN_F(log1p)(TN_F(exp)(-TN_F(fabs)(a))), 0, \
      TN_DERIV(tn_mul(g, tn_sigmoid(a)))) \
    X(ERF,        erf,        1, TN_EWK_FLOAT, TN_F(erf)(a), 0, \
      TN_DERIV(tn_mul(g, tn_mul(tn_lit(g, 1.12837916709551257390), tn_exp(tn_neg(tn_sqr(a))))))) \
    X(ERFC,       erfc,       1, TN_EWK_FLOAT, TN_F(erfc)(a), 0, \
      TN_DERIV(tn_mul(g, tn_mul(tn_lit(g, -1.12837916709551257390), tn_exp(tn_neg(tn_sqr(a))))))) \
    X(RELU,       relu,       1, TN_EWK_ARITH, ((a) != (a) ? (a) : (a) > 0 ? (a) : (TN_T)0), ((a) > 0 ? (a) : 0), \
      TN_DERIV(tn_where(tn_gt(a, tn_lit(g, 0.0)), g, tn_lit(g, 0.0)))) \
    X(LEAKY_RELU, leaky_relu, 2, TN_EWK_FLOAT, ((a) > 0 ? (a) : (a) * (b)), 0, \
      TN_DERIV(i == 0 ? tn_where(tn_gt(a, tn_lit(g, 0.0)), g, tn_mul(g, b)) \
                      : tn_where(tn_gt(a, tn_lit(g, 0.0)), tn_lit(g, 0.0), tn_mul(g, a)))) \
    X(ELU,        elu,        2, TN_EWK_FLOAT, ((a) > 0 ? (a) : (b) * TN_F(expm1)(a)), 0, \
      TN_DERIV(i == 0 ? tn_where(tn_gt(a, tn_lit(g, 0.0)), g, tn_mul(g, tn_add(z, b))) \
                      : tn_where(tn_gt(a, tn_lit(g, 0.0)), tn_lit(g, 0.0), tn_mul(g, tn_expm1(a))))) \
    X(SELU,       selu,       1, TN_EWK_FLOAT, (TN_T)1.05070098735548049342 * ((a) > 0 ? (a) : (TN_T)1.67326324235437728482 * TN_F(expm1)(a)), 0, \
      TN_DERIV(tn_where(tn_gt(a, tn_lit(g, 0.0)), tn_mul(g, tn_lit(g, 1.05070098735548049342)), \
                        tn_mul(g, tn_add(z, tn_lit(g, 1.75809934084737685994)))))) \
    X(GELU,       gelu,       1, TN_EWK_FLOAT, ((a) < (TN_T)-1e4 ? -(TN_T)0 : (TN_T)0.5 * (a) * TN_F(erfc)(-(a) * (TN_T)0.70710678118654752440)), 0, \
      TN_DERIV(tn_mul(g, tn_add(tn_mul(tn_lit(g, 0.5), tn_erfc(tn_mul(a, tn_lit(g, -0.70710678118654752440)))), \
                                tn_mul(tn_mul(a, tn_lit(g, 0.39894228040143267794)), tn_exp(tn_mul(tn_sqr(a), tn_lit(g, -0.5)))))))) \
    X(GELU_TANH,  gelu_tanh,  1, TN_EWK_FLOAT, ((a) < (TN_T)-1e4 ? -(TN_T)0 : (a) / ((TN_T)1 + TN_F(exp)((TN_T)-1.59576912160573071176 * ((a) + (TN_T)0.044715 * (a) * (a) * (a))))), 0, \
      TN_DERIV(tn_mul(g, tn_add(tn_sigmoid(tn_mul(tn_lit(g, 1.59576912160573071176), tn_add(a, tn_mul(tn_lit(g, 0.044715), tn_mul(a, tn_sqr(a)))))), \
                                tn_mul(tn_mul(a, tn_mul(tn_sigmoid(tn_mul(tn_lit(g, 1.59576912160573071176), tn_add(a, tn_mul(tn_lit(g, 0.044715), tn_mul(a, tn_sqr(a)))))), \
                                                        tn_sigmoid(tn_mul(tn_lit(g, -1.59576912160573071176), tn_add(a, tn_mul(tn_lit(g, 0.044715), tn_mul(a, tn_sqr(a)))))))), \
                                       tn_add(tn_lit(g, 1.59576912160573071176), tn_mul(tn_lit(g, 0.21406444881780074633), tn_sqr(a)))))))) \
    X(SOFTSIGN,   softsign,   1, TN_EWK_FLOAT, (!(TN_F(fabs)(a) > (TN_T)1e30) ? (a) / ((TN_T)1 + TN_F(fabs)(a)) : TN_F(copysign)((TN_T)1, a)), 0, \
      TN_DERIV(tn_div(g, tn_sqr(tn_add(tn_lit(g, 1.0), tn_abs(a)))))) \
    X(HARD_SIGMOID, hard_sigmoid, 1, TN_EWK_FLOAT, ((a) != (a) ? (a) : TN__CLIP((a) + (TN_T)3, (TN_T)0, (TN_T)6) / (TN_T)6), 0, \
      TN_DERIV(tn_where(tn_and(tn_gt(a, tn_lit(g, -3.0)), tn_lt(a, tn_lit(g, 3.0))), tn_div(g, tn_lit(g, 6.0)), tn_lit(g, 0.0)))) \
    X(SILU,       silu,       1, TN_EWK_FLOAT, ((a) < (TN_T)-1e4 ? -(TN_T)0 \
                                                : ((a) >= 0 ? (a) : (a) * TN_F(exp)(-TN_F(fabs)(a))) / ((TN_T)1 + TN_F(exp)(-TN_F(fabs)(a)))), 0, \
      TN_DERIV(tn_mul(g, tn_mul(tn_sigmoid(a), tn_add(tn_lit(g, 1.0), tn_mul(a, tn_sigmoid(tn_neg(a)))))))) \
    X(MISH,       mish,       1, TN_EWK_FLOAT, ((a) < (TN_T)-1e4 ? -(TN_T)0 \
                                                : (a) * TN__MISH_P(a, TN_F(exp)(-TN_F(fabs)(a))) \
                                                      / (TN__MISH_P(a, TN_F(exp)(-TN_F(fabs)(a))) + TN__MISH_Q(a, TN_F(exp)(-TN_F(fabs)(a))))), 0, \
      TN_DERIV(tn_mul(g, tn_add(tn_tanh(tn_softplus(a)), \
                                tn_mul(tn_mul(a, tn_sigmoid(a)), tn_sub(tn_lit(g, 1.0), tn_sqr(tn_tanh(tn_softplus(a))))))))) \
    X(FLOOR,      floor,      1, TN_EWK_ARITH, TN_F(floor)(a), (a), \
      TN_DISCRETE) \
    X(CEIL,       ceil,       1, TN_EWK_ARITH, TN_F(ceil)(a), (a), \
      TN_DISCRETE) \
    X(ROUND,      round,      1, TN_EWK_ARITH, TN_F(rint)(a), (a), \
      TN_DISCRETE) \
    X(MINIMUM,    minimum,    2, TN_EWK_ARITH, ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b)), ((a) < (b) ? (a) : (b)), \
      TN_DERIV(tn_where(i == 0 ? tn_and(tn_eq(z, a), tn_neq(a, b)) : tn_eq(z, b), g, tn_lit(g, 0.0)))) \
    X(MAXIMUM,    maximum,    2, TN_EWK_ARITH, ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b)), ((a) > (b) ? (a) : (b)), \
      TN_DERIV(tn_where(i == 0 ? tn_and(tn_eq(z, a), tn_neq(a, b)) : tn_eq(z, b), g, tn_lit(g, 0.0)))) \
    X(CLIP,       clip,       3, TN_EWK_ARITH, ((a) != (a) ? (a) : (b) != (b) ? (b) : TN__CLIP(a, b, c)), TN__CLIP(a, b, c), \
      TN_DERIV(tn_where(i == 0 ? tn_and(tn_ge(a, b), tn_le(a, c)) : i == 1 ? tn_and(tn_lt(a, b), tn_le(b, c)) \
                                                                         : tn_gt(tn_maximum(a, b), c), g, tn_lit(g, 0.0)))) \
    X(LT,         lt,         2, TN_EWK_CMP,   (TN_I)((a) < (b)), (TN_I)((a) < (b)), \
      TN_DISCRETE) \
    X(LE,         le,         2, TN_EWK_CMP,   (TN_I)((a) <= (b)), (TN_I)((a) <= (b)), \
      TN_DISCRETE) \
    X(GT,         gt,         2, TN_EWK_CMP,   (TN_I)((a) > (b)), (TN_I)((a) > (b)), \
      TN_DISCRETE) \
    X(GE,         ge,         2, TN_EWK_CMP,   (TN_I)((a) >= (b)), (TN_I)((a) >= (b)), \
      TN_DISCRETE) \
    X(EQ,         eq,         2, TN_EWK_CMP,   (TN_I)((a) == (b)), (TN_I)((a) == (b)), \
      TN_DISCRETE) \
    X(NEQ,        neq,        2, TN_EWK_CMP,   (TN_I)((a) != (b)), (TN_I)((a) != (b)), \
      TN_DISCRETE) \
    X(AND,        and,        2, TN_EWK_LOGIC, 0, (TN_I)((a) && (b)), \
      TN_DISCRETE) \
    X(OR,         or,         2, TN_EWK_LOGIC, 0, (TN_I)((a) || (b)), \
      TN_DISCRETE) \
    X(XOR,        xor,        2, TN_EWK_LOGIC, 0, (TN_I)(!(a) != !(b)), \
      TN_DISCRETE) \
    X(NOT,        not,        1, TN_EWK_LOGIC, 0, (TN_I)(!(a)), \
      TN_DISCRETE) \
    X(WHERE,      where,      3, TN_EWK_WHERE, ((a) ? (b) : (c)), ((a) ? (b) : (c)), \
      TN_DERIV(i == 1 ? tn_where(a, g, tn_lit(g, 0.0)) : tn_where(a, tn_lit(g, 0.0), g))) \
    X(CAST,       cast,       1, TN_EWK_CAST,  (a), (a), \
      TN_DERIV(g))

/* Float floor division and mod: NumPy's divmod (npy_divmod), one definition
   for both, so (a // b) * b + a % b == a where NumPy's holds. The remainder
   is fmod's (exact) moved to the divisor's sign; the quotient (a - mod) / b
   is nearly an integer and is snapped to it: 1.0 // 0.1 is 9, as 1.0 % 0.1
   is 0.09999999999999995 (floor(1.0 / 0.1) gives 10: the division rounds up
   to 10). A zero remainder takes b's sign, a zero quotient the sign of
   a / b; b == 0 gives a / b and NaN; inf // x is NaN. Written once per float
   type (F: the suffix of its libm functions, f or none), so the table's
   TN_F(tn__floordiv) names the one of the compute type, on the CPU and in
   CUDA alike. */
#define TN__FLOAT_DIVMOD(QUAL, T, F) \
    QUAL T tn__divmod##F(T a, T b, T *mod) { \
        T m = fmod##F(a, b); \
        if (b == 0) { *mod = m; return a / b; } \
        T q = (a - m) / b; \
        if (m == 0) m = copysign##F((T)0, b); \
        else if ((b < 0) != (m < 0)) { m += b; q -= 1; } \
        *mod = m; \
        if (q == 0) return copysign##F((T)0, a / b); \
        T fq = floor##F(q); \
        return q - fq > (T)0.5 ? fq + 1 : fq; } \
    QUAL T tn__floordiv##F(T a, T b) { T m; return tn__divmod##F(a, b, &m); } \
    QUAL T tn__floormod##F(T a, T b) { T m; tn__divmod##F(a, b, &m); return m; }

/* Scalar helpers the expressions call: compiled here and, as text, into every
   generated CUDA kernel (QUAL is "static inline" or "__device__ inline").
   Int floor division and mod are NumPy's: x // 0 and x % 0 are 0 (NumPy
   also warns), MIN // -1 wraps to MIN and MIN % -1 is 0 (NumPy 1.24). Int
   pow with a negative exponent, which NumPy refuses, is the integer part of
   the real power: 1 or -1 for a base of 1 or -1, else 0 (0 ** -1 too). */
#define TN__SCALAR_HELPERS(QUAL) \
    TN__FLOAT_DIVMOD(QUAL, float, f) \
    TN__FLOAT_DIVMOD(QUAL, double, ) \
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
/* Non-elementwise ops. Their params are read and written through the
   accessors of the >>params block below, which also says where each lives. */
#define TN_OTHER_OPS(X) \
    X(INPUT)          /* leaf: a symbolic input */ \
    X(CONSTANT)       /* leaf: value */ \
    X(SHARED)         /* leaf: value, replaced by updates */ \
    X(PROJ)           /* output tn__p_proj_index of a multi-output node in[0] */ \
    X(COMPOSITE)      /* fused elementwise: ext = tn_ew_program; n_out outputs */ \
    X(SUM)            /* reductions: tn__p_red_mask, tn__p_red_keepdims; ext: optional prologue program */ \
    X(PROD) X(MEAN) X(MAX) X(MIN) X(ARGMAX) X(ARGMIN) X(ALL) X(ANY) \
    X(LOGSUMEXP)      /* as reductions */ \
    X(SOFTMAX)        /* tn__p_axis */ \
    X(LOG_SOFTMAX)    /* tn__p_axis */ \
    X(CUMSUM)         /* tn__p_axis; NumPy's cumsum along one axis */ \
    X(CUMPROD)        /* tn__p_axis; NumPy's cumprod along one axis */ \
    X(IM2COL)         /* windows of an (N, C, spatial...) image as columns (the >>ops_conv section): tn__p_conv_* */ \
    X(COL2IM)         /* the columns summed back into the image (IM2COL's transpose): tn__p_conv_* */ \
    X(POOL)           /* max or average over each window of an (N, C, spatial...) image: tn__p_conv_*, tn__p_pool_mode */ \
    X(POOL_GRAD)      /* in: x, y = POOL(x) (average: gy, unread), gy: the gradient of POOL for gy, one pass: POOL's params */ \
    X(PRINT)          /* in[0] passed through (copied), printed each run (the >>ops_print section): tn__p_print_* */ \
    X(DOT)            /* matmul semantics: 1-d dot, matrix-vector, matrix, batched with broadcast batch dims */ \
    X(GEMM)           /* in: C, A, B: alpha*A@B + beta*C (tn__p_alpha, tn__p_beta); C broadcasts to the product */ \
    X(GEMV)           /* in: y, A, x: alpha*A@x + beta*y */ \
    X(OUTER)          /* in: a, b vectors */ \
    X(RESHAPE)        /* tn__p_shape (at most one -1); a view of a kernel's output, else a copy (the >>ops_shape section) */ \
    X(DIMSHUFFLE)     /* tn__p_shuffle_src of each output dim, or -1 for a new broadcastable dim ('x'); view */ \
    X(SLICE)          /* tn__p_slice_start/stop/step of each dim, TN_NONE where omitted; view */ \
    X(BROADCAST_TO)   /* tn__p_shape; view */ \
    X(FLATTEN)        /* tn__p_flatten_outdim: keeps outdim-1 leading dims, flattens the rest */ \
    X(CONCATENATE)    /* variadic, tn__p_axis */ \
    X(ADV_SUBTENSOR)  /* gather (the >>ops_index section): in: x, index arrays; tn__p_index_axis, _along */ \
    X(ADV_INC_SUBTENSOR) /* scatter: in: x, v, index arrays; tn__p_index_axis, _along, _set */ \
    X(INC_SUBTENSOR)  /* in: x, v; SLICE's slice params and tn__p_incsub_set */ \
    X(ARGSORT)        /* tn__p_axis, tn__p_sort_desc, tn__p_sort_k; int64 */ \
    X(ALLOC)          /* in[0] value broadcast to tn__p_shape; with a second input `like` (tn_fill), to like's shape instead */ \
    X(EYE)            /* tn__p_eye_n, _m, _k (diagonal offset); tn__p_out_dtype. tn_eye_var: in n, m (value inputs: \
                         their values give the shape), k (int64) instead */ \
    X(ARANGE)         /* tn__p_arange_start, _stop, _step; tn__p_out_dtype */ \
    X(SIZE)           /* the count of elements a reduction over tn__p_red_mask (and keepdims) folds, of in[0]'s \
                         shape only; with a prologue (ext), of its inputs' broadcast shape (the >>size section) */ \
    X(RANDOM)         /* a draw of a random stream (the >>ops_random section): in[0] the stream's state, optional \
                         in[1] whose shape it takes; tn__p_rand_* */ \
    X(CUSTOM)         /* user op: ext = tn_custom_op */ \
    X(GPU_FROM_HOST)  /* in[0] copied to the device (node->device); no params; Theano's GpuFromHost */ \
    X(HOST_FROM_GPU)  /* in[0] copied to the host; waits for the stream; Theano's HostFromGpu */ \
    X(SCAN)           /* a loop (the >>scan section): ext = the loop (step function, taps); no params. in: sequences, \
                         initial values, non_sequences; out: each output's stacked buffer (initial rows first), \
                         then each update's last value. ScanGrad (ext->bwd): in: the forward's inputs, stacked \
                         outputs and their gradients; out: the gradient of each forward input */

typedef enum tn_op {
    TN_OP_NONE = 0,
#define TN__X_EW_ENUM(E, n, ar, k, fe, ie, d) TN_OP_##E,
    TN_EW_OPS(TN__X_EW_ENUM)
#undef TN__X_EW_ENUM
#define TN__X_ENUM(E) TN_OP_##E,
    TN_OTHER_OPS(TN__X_ENUM)
#undef TN__X_ENUM
    TN_OP_COUNT
} tn_op;

#define TN_NONE INT64_MIN   /* an omitted slice bound */

/* >>params --------------------------------------------------------------- */
/* Where each op family keeps its parameters in tn_params (a flat record, so
   the merge pass hashes and compares nodes by value), as accessors: code
   reads and writes params only through these. A setter writes only its own
   fields; start from a zeroed tn_params. */
#define TN__P_DTYPE (TN_MAX_IPARAMS - 2)   /* EYE, ARANGE: the output dtype */
#define TN__P_NDIM  (TN_MAX_IPARAMS - 1)   /* RESHAPE, DIMSHUFFLE, BROADCAST_TO, ALLOC: the output rank */

/* CAST: the target dtype (i[0]). */
static inline tn_dtype tn__p_cast_dtype(const tn_params *p) { return (tn_dtype)p->i[0]; }
static inline void tn__p_set_cast_dtype(tn_params *p, tn_dtype t) { p->i[0] = (int64_t)t; }
/* PROJ: which output of its source it reads (i[0]). */
static inline int tn__p_proj_index(const tn_params *p) { return (int)p->i[0]; }
static inline void tn__p_set_proj_index(tn_params *p, int k) { p->i[0] = k; }
/* Reductions (SUM .. LOGSUMEXP, ARGMAX, ARGMIN, ALL, ANY) and SIZE: the reduced axes
   as a bit mask (i[0]), keepdims (i[1]). */
static inline uint64_t tn__p_red_mask(const tn_params *p) { return (uint64_t)p->i[0]; }
static inline bool tn__p_red_keepdims(const tn_params *p) { return p->i[1] != 0; }
static inline void tn__p_set_red(tn_params *p, uint64_t mask, bool keepdims) { p->i[0] = (int64_t)mask; p->i[1] = keepdims; }
/* SOFTMAX, LOG_SOFTMAX, CUMSUM, CUMPROD, CONCATENATE, ARGSORT: one axis, >= 0 (i[0]). */
static inline int tn__p_axis(const tn_params *p) { return (int)p->i[0]; }
static inline void tn__p_set_axis(tn_params *p, int axis) { p->i[0] = axis; }
/* IM2COL, COL2IM: spatial rank (i[0]), groups (i[1]), per spatial dim d the
   kernel (i[2+d]), stride (i[5+d]), padding before (i[8+d]) and after
   (i[11+d]), dilation (i[14+d]) and the image size (i[17+d]); the value of
   padded positions (f[0]: 0, or -inf for max pooling). */
static inline int tn__p_conv_nsp(const tn_params *p) { return (int)p->i[0]; }
static inline int tn__p_conv_groups(const tn_params *p) { return (int)p->i[1]; }
static inline int64_t tn__p_conv_at(const tn_params *p, int what, int d) { return p->i[2 + 3 * what + d]; }   /* what: TN__CONV_K .. TN__CONV_IN */
static inline double tn__p_conv_padv(const tn_params *p) { return p->f[0]; }
enum { TN__CONV_K = 0, TN__CONV_S, TN__CONV_PLO, TN__CONV_PHI, TN__CONV_DL, TN__CONV_IN };
static inline void tn__p_set_conv(tn_params *p, int nsp, int groups, const int64_t v[6][3], double padv) {
    p->i[0] = nsp; p->i[1] = groups;
    for (int w = 0; w < 6; w++) for (int d = 0; d < 3; d++) p->i[2 + 3 * w + d] = d < nsp ? v[w][d] : 0;
    p->f[0] = padv;
}
/* POOL: IM2COL's geometry (groups 1, pad value 0) and the mode (i[20]). */
enum { TN__POOL_MAX = 0, TN__POOL_AVG, TN__POOL_AVG_EXCL };   /* average: padding counted, or in-image positions only */
static inline int tn__p_pool_mode(const tn_params *p) { return (int)p->i[20]; }
static inline void tn__p_set_pool_mode(tn_params *p, int mode) { p->i[20] = mode; }
/* PRINT: what to print (i[0], TN_PRINT_* bits) and the message, its bytes
   packed into i[1..] (NUL-terminated, so merge compares it by value). */
#define TN__PRINT_MSG_MAX ((int)((TN_MAX_IPARAMS - 1) * sizeof(int64_t)) - 1)
static inline unsigned tn__p_print_attrs(const tn_params *p) { return (unsigned)p->i[0]; }
static inline const char *tn__p_print_msg(const tn_params *p) { return (const char *)(const void *)&p->i[1]; }
static inline void tn__p_set_print(tn_params *p, unsigned attrs, const char *msg) {
    p->i[0] = attrs;
    char *m = (char *)(void *)&p->i[1];
    int n = 0;
    for (; msg && msg[n] && n < TN__PRINT_MSG_MAX; n++) m[n] = msg[n];
    m[n] = 0;
}
/* GEMM, GEMV: alpha * A @ B + beta * C (f[0], f[1]). */
static inline double tn__p_alpha(const tn_params *p) { return p->f[0]; }
static inline double tn__p_beta(const tn_params *p) { return p->f[1]; }
static inline void tn__p_set_gemm(tn_params *p, double alpha, double beta) { p->f[0] = alpha; p->f[1] = beta; }
/* RESHAPE, BROADCAST_TO, ALLOC: a target shape (i[0..ndim)), its rank in
   i[TN__P_NDIM]. shape NULL: the rank only (tn_fill's). */
static inline int tn__p_ndim(const tn_params *p) { return (int)p->i[TN__P_NDIM]; }
static inline const int64_t *tn__p_shape(const tn_params *p) { return p->i; }
static inline void tn__p_set_shape(tn_params *p, int ndim, const int64_t *shape) {
    for (int d = 0; shape && d < ndim; d++) p->i[d] = shape[d];
    p->i[TN__P_NDIM] = ndim;
}
/* DIMSHUFFLE: the source axis of output dim k, or -1 for a new broadcastable
   dim (i[k]); the output rank is tn__p_ndim. */
static inline int tn__p_shuffle_src(const tn_params *p, int k) { return (int)p->i[k]; }
static inline void tn__p_set_shuffle(tn_params *p, int ndim, const int *pattern) {
    for (int k = 0; k < ndim; k++) p->i[k] = pattern[k];
    p->i[TN__P_NDIM] = ndim;
}
/* SLICE: start, stop, step of dim d (i[3d], i[3d+1], i[3d+2]), TN_NONE where
   omitted; a step of 1 is stored as TN_NONE (one spelling per slice). */
static inline int64_t tn__p_slice_start(const tn_params *p, int d) { return p->i[3 * d]; }
static inline int64_t tn__p_slice_stop(const tn_params *p, int d) { return p->i[3 * d + 1]; }
static inline int64_t tn__p_slice_step(const tn_params *p, int d) { return p->i[3 * d + 2]; }
static inline bool tn__p_slice_whole(const tn_params *p, int d) {
    return p->i[3 * d] == TN_NONE && p->i[3 * d + 1] == TN_NONE && (p->i[3 * d + 2] == TN_NONE || p->i[3 * d + 2] == 1);
}
static inline void tn__p_set_slice(tn_params *p, int d, int64_t start, int64_t stop, int64_t step) {
    p->i[3 * d] = start;
    p->i[3 * d + 1] = stop;
    p->i[3 * d + 2] = step == 1 ? TN_NONE : step;
}
static inline void tn__p_set_slice_whole(tn_params *p) {   /* every dim whole */
    for (int d = 0; d < TN_MAX_DIMS; d++) tn__p_set_slice(p, d, TN_NONE, TN_NONE, TN_NONE);
}
/* ADV_SUBTENSOR, ADV_INC_SUBTENSOR: the first indexed axis (i[0]), the
   take_along_axis form (i[1]), set instead of inc (i[2]). */
static inline int tn__p_index_axis(const tn_params *p) { return (int)p->i[0]; }
static inline bool tn__p_index_along(const tn_params *p) { return p->i[1] != 0; }
static inline bool tn__p_index_set(const tn_params *p) { return p->i[2] != 0; }
static inline void tn__p_set_index(tn_params *p, int axis, bool along, bool set) { p->i[0] = axis; p->i[1] = along; p->i[2] = set; }
/* INC_SUBTENSOR: SLICE's slices (i[0 .. 3 TN_MAX_DIMS)), set instead of inc (the next). */
#define TN__P_INCSUB_SET (3 * TN_MAX_DIMS)
static inline bool tn__p_incsub_set(const tn_params *p) { return p->i[TN__P_INCSUB_SET] != 0; }
static inline void tn__p_set_incsub_set(tn_params *p, bool set) { p->i[TN__P_INCSUB_SET] = set; }
/* ARGSORT: the axis (tn__p_axis, i[0]), descending (i[1]), how many of the
   first indices are kept (i[2]; -1: all). */
static inline bool tn__p_sort_desc(const tn_params *p) { return p->i[1] != 0; }
static inline int64_t tn__p_sort_k(const tn_params *p) { return p->i[2]; }
static inline void tn__p_set_sort(tn_params *p, int axis, bool desc, int64_t k) { p->i[0] = axis; p->i[1] = desc; p->i[2] = k; }
/* FLATTEN: the output rank (i[0]). */
static inline int tn__p_flatten_outdim(const tn_params *p) { return (int)p->i[0]; }
static inline void tn__p_set_flatten_outdim(tn_params *p, int outdim) { p->i[0] = outdim; }
/* EYE, ARANGE: the output dtype (i[TN__P_DTYPE]). */
static inline tn_dtype tn__p_out_dtype(const tn_params *p) { return (tn_dtype)p->i[TN__P_DTYPE]; }
/* EYE: n rows, m columns, the diagonal's offset k (i[0], i[1], i[2]). */
static inline int64_t tn__p_eye_n(const tn_params *p) { return p->i[0]; }
static inline int64_t tn__p_eye_m(const tn_params *p) { return p->i[1]; }
static inline int64_t tn__p_eye_k(const tn_params *p) { return p->i[2]; }
static inline void tn__p_set_eye(tn_params *p, tn_dtype t, int64_t n, int64_t m, int64_t k) {
    p->i[0] = n; p->i[1] = m; p->i[2] = k;
    p->i[TN__P_DTYPE] = (int64_t)t;
}
/* ARANGE: start, stop, step (f[0], f[1], f[2]). */
static inline double tn__p_arange_start(const tn_params *p) { return p->f[0]; }
static inline double tn__p_arange_stop(const tn_params *p) { return p->f[1]; }
static inline double tn__p_arange_step(const tn_params *p) { return p->f[2]; }
static inline void tn__p_set_arange(tn_params *p, tn_dtype t, double start, double stop, double step) {
    p->f[0] = start; p->f[1] = stop; p->f[2] = step;
    p->i[TN__P_DTYPE] = (int64_t)t;
}

/* RANDOM: the distribution (i[0], a tn_rdist), the draw's number in its
   stream (i[1]), randint's [low, high) (i[2], i[3]), the rank (i[4]; -1:
   in[1]'s shape) and shape (i[5..]), the dtype (i[TN__P_DTYPE]), the float
   parameters (f[0], f[1]: uniform's low and high, normal's mean and std,
   bernoulli's p). */
static inline int tn__p_rand_dist(const tn_params *p) { return (int)p->i[0]; }
static inline uint32_t tn__p_rand_draw(const tn_params *p) { return (uint32_t)p->i[1]; }
static inline int64_t tn__p_rand_ilow(const tn_params *p) { return p->i[2]; }
static inline int64_t tn__p_rand_ihigh(const tn_params *p) { return p->i[3]; }
static inline int tn__p_rand_ndim(const tn_params *p) { return (int)p->i[4]; }
static inline const int64_t *tn__p_rand_shape(const tn_params *p) { return p->i + 5; }
static inline double tn__p_rand_a(const tn_params *p) { return p->f[0]; }
static inline double tn__p_rand_b(const tn_params *p) { return p->f[1]; }
static inline void tn__p_set_rand(tn_params *p, int dist, uint32_t draw, tn_dtype t, int ndim, const int64_t *shape,
                                  double a, double b, int64_t ilow, int64_t ihigh) {
    p->i[0] = dist; p->i[1] = draw; p->i[2] = ilow; p->i[3] = ihigh; p->i[4] = ndim;
    for (int d = 0; shape && d < ndim; d++) p->i[5 + d] = shape[d];
    p->i[TN__P_DTYPE] = (int64_t)t;
    p->f[0] = a; p->f[1] = b;
}

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

/* >>api_ew_program ------------------------------------------------------- */
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

/* A random draw inside a program (the >>ops_random section's generator): an
   instruction whose op is TN_OP_RANDOM reads its stream's seed and call count
   from the int64 registers a and b (0-d inputs) and gives, at each element,
   that element of the unfused draw (the same bits). The draw's shape is the
   broadcast shape of the inputs in `shape_of` (bit i: input i), aligned to the
   iteration space, where a dim of 1 repeats its element (the draw of a
   tn_random_like, whose variable those inputs compute). */
typedef struct tn_ew_rand {
    int dist;              /* tn_rdist */
    uint32_t draw;         /* the draw's number in its stream */
    double a, b;           /* uniform: high - low, low; normal: mean, std; bernoulli: p */
    int64_t ilow;          /* randint: low, */
    uint64_t range;        /* and high - low */
    uint64_t shape_of;
} tn_ew_rand;

typedef struct tn_ew_program {
    int n_in;
    tn_dtype *in_dtype;    /* storage dtype of each input */
    int n_instr;
    tn_ew_instr *instr;
    int n_out;
    int32_t *out_reg;      /* register each output stores */
    tn_dtype *out_dtype;   /* storage dtype of each output */
    tn_ew_rand *rand;      /* NULL, or per instruction: the draw of each TN_OP_RANDOM */
    /* A reduction's program only (node->ext of a TN_OPF_PROLOGUE reduction): NULL, or the epilogue, a
       program applied to each result before it is stored. Its input 0 is the reduced value, in the
       reduction's dtype; its inputs 1.. are the node's inputs after this program's n_in. */
    const struct tn_ew_program *epi;
} tn_ew_program;

/* >>op_def --------------------------------------------------------------- */
/* Everything an op is: one row of the op table (the >>ops_table section of
   tensor.h), which tn__op_def returns. Each part of the catalogue writes the
   rows of its ops next to their code (its rows block, e.g. >>ew_rows). */
typedef enum tn_op_flags {
    TN_OPF_ELEMWISE   = 1 << 0,  /* a row of TN_EW_OPS: fuses into Composite programs */
    TN_OPF_DISCRETE   = 1 << 1,  /* no gradient passes (integer, boolean or piecewise constant results):
                                    tn_grad and tn_rop pass zero; no vjp needed */
    TN_OPF_LINEAR     = 1 << 2,  /* linear in in[0], any other input only shaping the result: the
                                    forward mode applies the op itself to in[0]'s tangent (no jvp needed) */
    TN_OPF_PROLOGUE   = 1 << 3,  /* a reduction whose input can be a fused elementwise program (node->ext) */
    TN_OPF_INPLACE    = 1 << 4,  /* elementwise in place: the output may take the buffer of any input of
                                    its type that nothing else reads (the inplace pass) */
    TN_OPF_INPLACE_ACC = 1 << 5, /* accumulates into in[0] (gemm's C): the output may take in[0]'s buffer
                                    when it is read once, by this node */
    TN_OPF_NO_KERNEL  = 1 << 6,  /* computed elsewhere (leaves hold values; PROJ reads its source's output) */
    TN_OPF_HOST_VALUES = 1 << 7  /* no kernel of the op reads its value inputs (tn_op_def.value_inputs), so
                                    placement copies none to a device: they are read on the host only */
} tn_op_flags;

typedef struct tn_op_def {
    int op;                /* its TN_OP_* value: the op table's rows come in any order */
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
    /* Reverse mode (tn_grad): given g = d cost / d node, fills gin[i] for each
       i with need[i] with d cost / d in[i], built from public constructors;
       gin[i] may keep broadcast dims of its own and another float dtype (the
       driver sums and casts it to in[i]'s type); NULL means no gradient
       reaches in[i]. Failures return the error. */
    tn_result (*vjp)(tn_var *node, tn_var *g, const bool *need, tn_var **gin);
    /* Forward mode (tn_rop): *out = the node's tangent given its inputs'
       tangents t[i] (NULL: zero); the driver casts it to the node's dtype.
       NULL: TN_OPF_LINEAR ops apply themselves to the tangent, other ops
       have no forward mode (TN_ERR_UNSUPPORTED). */
    tn_result (*jvp)(tn_var *node, tn_var *const *t, tn_var **out);
    unsigned flags;        /* tn_op_flags */
    /* A stateful op (a random draw): the update of the shared state it reads,
       which tn_function adds to every function that computes the node, unless
       one of the function's updates sets that shared variable. NULL: none. */
    tn_result (*state_update)(const tn_var *node, tn_update *u);
    /* An output shape that depends on input values (eye(n, m, k)): bit i of
       value_inputs(node) set when the type rule reads in[i]'s value, a 0-d
       leaf (an input, a shared variable or a constant). The executor reads
       them (on the host; behind a transfer, from the leaf) when it plans a
       call, and a new value means a new plan, as a new input shape does;
       with TN_OPF_HOST_VALUES placement copies none to a device. infer_values is then the type rule: val[i] is in[i]'s value
       on the host, NULL where unknown (at build time, for a non-constant).
       NULL: the op's shapes come from its inputs' shapes only. */
    unsigned (*value_inputs)(const tn_var *node);
    tn_result (*infer_values)(const tn_var *node, const tn_type *in, const tn_array *const *val, tn_type *out);
} tn_op_def;

typedef struct tn_ew_info {
    const char *name;
    int arity;
    int kind;              /* TN_EWK_* */
    const char *fexpr;     /* the table's expressions, as text (for code generators) */
    const char *iexpr;
} tn_ew_info;

/* The op table is checked when it is filled, on first use: a row without a
   type rule, a CPU kernel (but TN_OPF_NO_KERNEL), a label, or a vjp (but
   TN_OPF_DISCRETE or no inputs) is an internal error, and then no node can
   be built (TN_ERR_INTERNAL naming the row). tn__op_def, tn__op_kind,
   tn__ew_info and tn__scalar_helpers_source are declared in tensor.h's
   >>backend_api section. */
TN_API bool tn__op_has(int op, unsigned flags);      /* the op's row has every one of flags */
/* The check of a table of n rows (indexed by tn_op): TN_OK, or TN_ERR_INTERNAL
   naming the first incomplete row and what it lacks. */
TN_API tn_result tn__op_table_check(const tn_op_def *rows, int n);
/* For tests: fills the op table from rows[TN_OP_COUNT] (NULL: the built-in
   rows) and checks it, as on first use; returns the check's result. Not
   thread-safe: only while no other thread uses the library. */
TN_API tn_result tn__op_table_fill(const tn_op_def *rows);

/* CPU elementwise engine: runs `prog` over the broadcast of the inputs into
   the outputs (all outputs have the broadcast shape). */
TN_API tn_result tn__cpu_ew_run(const tn_ew_program *prog, tn_array *const *in, tn_array *const *out);
/* tn__op_def, tn__op_kind, tn__ew_info, tn__ew_program_of: tensor.h's >>backend_api section. */

/* >>constructors --------------------------------------------------------- */
/* Each records one node (or a few) and returns it, or NULL with the error set
   (tn_last_error); a NULL argument, as from an earlier failure, gives NULL. */

#define TN__DECL_1(n) TN_API tn_var *tn_##n(tn_var *a);
#define TN__DECL_2(n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b);
#define TN__DECL_3(n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b, tn_var *c);
/* tn_identity, tn_add, ..., tn_where(cond, a, b), one per row of TN_EW_OPS,
   with its name: tn_atan, tn_asinh, tn_erfc, tn_relu (maximum(x, 0): NaN stays
   NaN, relu(-0) is +0, ints stay ints), ...; the activations tn_leaky_relu(x,
   alpha), tn_elu(x, alpha) (alpha a variable or tn_lit), tn_selu, tn_gelu
   (exact, erfc), tn_gelu_tanh, tn_softsign, tn_hard_sigmoid (relu6(x+3)/6),
   tn_silu, tn_mish (README's Activations); tn_cast takes a dtype: */
#define TN__X_DECL(E, n, ar, k, fe, ie, d) TN__X_DECL_IF_##k(n, ar)
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
/* tn_sum(ones_like(x), axes, naxes, keepdims) without reading x: the number
   of elements over the axes, from x's shape at call time (NumPy's x.size for
   every axis), in the sum's dtype (a float x's, else int64); no gradient. */
TN_API tn_var *tn_size(tn_var *x, const int *axes, int naxes, bool keepdims);
TN_API tn_var *tn_argmax(tn_var *x, int axis, bool keepdims);  /* first index of the max; int64 */
TN_API tn_var *tn_argmin(tn_var *x, int axis, bool keepdims);
TN_API tn_var *tn_softmax(tn_var *x, int axis);
TN_API tn_var *tn_log_softmax(tn_var *x, int axis);

/* Running sum and product along one axis (negative counts from the end), as
   NumPy's cumsum(x, axis) and cumprod(x, axis): the shape of x; bool and int
   inputs give int64 (wrapping), floats keep their dtype. */
TN_API tn_var *tn_cumsum(tn_var *x, int axis);
TN_API tn_var *tn_cumprod(tn_var *x, int axis);

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
/* eye with symbolic sizes: n, m and k are 0-d int32/int64 variables (m NULL:
   n; k NULL: 0); n and m must be inputs, shared variables or constants,
   whose values give the (n, m) shape at each call ((?, ?) at build time). */
TN_API tn_var *tn_eye_var(tn_dtype t, tn_var *n, tn_var *m, tn_var *k);
TN_API tn_var *tn_arange(tn_graph *g, tn_dtype t, double start, double stop, double step);

/* Convolutions and pooling (the >>ops_conv section), NCHW as PyTorch:
   x (N, C, spatial...) with 1 to 3 spatial dims, w (C_out, C / groups,
   kernel...). Zeroed options are the defaults: stride 1, no padding,
   dilation 1, one group. padding = TN_PAD_SAME pads so the output has the
   input's spatial size (stride 1; the odd extra pixel goes after, as
   PyTorch); TN_PAD_VALID pads nothing. The channel and spatial sizes of x
   and w must be static (the batch may vary). Pooling: kernel (stride
   defaults to the kernel), padding of at most half the kernel;
   avg_exclude_pad averages over the in-image positions only (PyTorch's
   count_include_pad=False). */
enum { TN_PAD_EXPLICIT = 0, TN_PAD_VALID, TN_PAD_SAME };
typedef struct tn_conv_opts {
    int stride[3], padding[3], dilation[3];   /* per spatial dim; 0: the default */
    int pad_mode;                             /* TN_PAD_EXPLICIT (padding[]), TN_PAD_VALID, TN_PAD_SAME */
    int groups;                               /* 0: 1 */
    int output_padding[3];                    /* tn_conv_transpose: added after, < stride or dilation */
    int kernel[3];                            /* pooling: the window */
    bool avg_exclude_pad;                     /* tn_avg_pool: count only in-image positions */
} tn_conv_opts;
TN_API tn_var *tn_conv(tn_var *x, tn_var *w, const tn_conv_opts *o);             /* any spatial rank 1..3 */
TN_API tn_var *tn_conv1d(tn_var *x, tn_var *w, const tn_conv_opts *o);
TN_API tn_var *tn_conv2d(tn_var *x, tn_var *w, const tn_conv_opts *o);
TN_API tn_var *tn_conv3d(tn_var *x, tn_var *w, const tn_conv_opts *o);
/* PyTorch's conv_transpose: x (N, C_in, ...), w (C_in, C_out / groups, kernel...). */
TN_API tn_var *tn_conv_transpose(tn_var *x, tn_var *w, const tn_conv_opts *o);
TN_API tn_var *tn_conv2d_transpose(tn_var *x, tn_var *w, const tn_conv_opts *o);
TN_API tn_var *tn_max_pool(tn_var *x, const tn_conv_opts *o);
TN_API tn_var *tn_avg_pool(tn_var *x, const tn_conv_opts *o);
TN_API tn_var *tn_max_pool2d(tn_var *x, const tn_conv_opts *o);
TN_API tn_var *tn_avg_pool2d(tn_var *x, const tn_conv_opts *o);
TN_API tn_var *tn_global_avg_pool(tn_var *x);      /* mean over the spatial dims, kept as size 1 */

/* Theano's Print op: x passed through unchanged (its gradient too), and each
   time a compiled function runs the node, one line per attribute on stdout:
   "message __str__ = [...]" (the values, as tn_array_print), "message shape
   = (2, 3)", "message mean = ...", max, min. attrs 0: the values. The
   message keeps its first 214 bytes. In a GPU function the value is copied
   to the host to be printed (a wait: such a function is not replayed as a
   CUDA graph). */
enum { TN_PRINT_VALUE = 1, TN_PRINT_SHAPE = 2, TN_PRINT_MEAN = 4, TN_PRINT_MAX = 8, TN_PRINT_MIN = 16 };
TN_API tn_var *tn_print(tn_var *x, const char *message, unsigned attrs);

/* Indexing and sorting (the >>ops_index section), NumPy's semantics. Index
   arrays are int32 or int64 of any shape; a negative index counts from the
   end; an index out of range fails the call with TN_ERR_INVALID naming the
   op, the index, the axis and its size (NumPy's IndexError). Gradients flow
   to x (and v), never to indices. */
TN_API tn_var *tn_take(tn_var *x, tn_var *indices, int axis);             /* np.take(x, indices, axis) */
TN_API tn_var *tn_take_along_axis(tn_var *x, tn_var *indices, int axis);  /* np.take_along_axis */
/* x[:, ..., i_0, ..., i_{n-1}, ...]: n index arrays on the consecutive axes
   from `axis`, broadcast together; their broadcast shape replaces those axes
   (NumPy's advanced indexing). p[arange(n), y] is tn_index(p, 0, 2, (tn_var *[]){ r, y }). */
TN_API tn_var *tn_index(tn_var *x, int axis, int n, tn_var *const *indices);
/* Theano's set_subtensor(x[...], v) and inc_subtensor(x[...], v): sub is x
   indexed by tn_slice (one slice per axis, chained), tn_take, tn_index or
   tn_take_along_axis; the result is x with those places set to (or
   incremented by) v, broadcast to sub's shape and cast to x's dtype. inc
   with repeated indices adds every one (np.add.at); set with repeated
   indices keeps the last on the CPU, any one of them on a GPU. */
TN_API tn_var *tn_set_subtensor(tn_var *sub, tn_var *v);
TN_API tn_var *tn_inc_subtensor(tn_var *sub, tn_var *v);
/* labels (ints, any shape) as one-hot rows of n: labels' shape + (n,), of
   dtype t (TN_DTYPE_NONE: floatX); a label outside [0, n) gives a zero row. */
TN_API tn_var *tn_one_hot(tn_var *labels, int64_t n, tn_dtype t);
/* Stable sorts along axis (negative from the end), NaN last, as NumPy's
   sort(kind='stable'); argsort gives int64 indices. */
TN_API tn_var *tn_sort(tn_var *x, int axis);
TN_API tn_var *tn_argsort(tn_var *x, int axis);
/* The k largest along axis, largest first (ties: the lower index first; NaN
   counts as the largest, as torch.topk): values and their int64 indices
   (either pointer may be NULL). */
TN_API tn_result tn_top_k(tn_var *x, int64_t k, int axis, tn_var **values, tn_var **indices);

/* Transfers (the >>transfer section). A function output that is tn_gpu_from_host(x)
   is returned as a device array (device >= 0) when the CUDA back end runs the
   function; on the CPU both are plain copies. The placement pass inserts and
   cancels these itself: users need them only to ask for a device result. */
TN_API tn_var *tn_gpu_from_host(tn_var *x);
/* x moved to the named context (>>api_contexts): host to device, or device
   to device (a peer copy, or through pinned host memory where the two GPUs
   cannot reach each other); debugprint shows GpuFromHost<ctx> / GpuToGpu<ctx>. */
TN_API tn_var *tn_gpu_from_host_ctx(tn_var *x, const char *ctx);
TN_API tn_var *tn_host_from_gpu(tn_var *x);

/* >>api_random ----------------------------------------------------------- */
/* Random streams inside graphs, as Theano's RandomStreams (the >>ops_random
   section). A stream owns a shared variable, its state: int64 [seed, calls].
   Each draw is a node; tn_function adds the update "calls + 1" of every
   stream its outputs or updates draw from (unless one of its own updates sets
   that state), so each call of a compiled function draws new numbers, two
   draws of one stream are independent, and the seed reproduces a run.
   Generator: Philox-4x32-10 (Salmon et al., SC'11), key = the seed, 128-bit
   counter = element block + 2^64 draw + 2^96 calls (so values repeat after
   2^32 calls). The CPU and the GPU give the same bits for every distribution
   and dtype (normal's log, sin and cos are computed by the library itself).
   dtype TN_DTYPE_NONE: floatX (randint: int64). Shapes are static; the
   _like draw takes the shape of a variable when the function runs. */
typedef struct tn_rstream tn_rstream;
typedef enum tn_rdist {
    TN_RAND_UNIFORM = 1,   /* [low, high) floats (up to rounding of low + (high - low) u) */
    TN_RAND_NORMAL,        /* mean + std z, z by Box-Muller */
    TN_RAND_BERNOULLI,     /* 1 with probability p, else 0; any dtype */
    TN_RAND_RANDINT        /* [low, high) int32 or int64, uniform */
} tn_rdist;
TN_API tn_rstream *tn_random_stream(tn_graph *g, uint64_t seed);   /* freed with g */
TN_API tn_var *tn_rstream_state(const tn_rstream *s);              /* its shared int64 [seed, calls] */
TN_API tn_result tn_rstream_seed(tn_rstream *s, uint64_t seed);    /* state = [seed, 0] */
TN_API tn_var *tn_random_uniform(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, double low, double high);
TN_API tn_var *tn_random_normal(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, double mean, double std);
TN_API tn_var *tn_random_bernoulli(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, double p);
TN_API tn_var *tn_random_randint(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, int64_t low, int64_t high);
/* A draw of like's shape (a, b: the distribution's two parameters; randint's integral). */
TN_API tn_var *tn_random_like(tn_rstream *s, tn_rdist dist, tn_dtype t, tn_var *like, double a, double b);
/* Inverted dropout: x where a bernoulli(1 - p) mask is 1, scaled by 1 / (1 - p),
   else 0 (p = 1: zeros; p = 0: x). The gradient reads the same mask. */
TN_API tn_var *tn_dropout(tn_rstream *s, tn_var *x, double p);

/* >>api_grad ------------------------------------------------------------- */
/* Symbolic differentiation (the >>grad section). Gradients are ordinary nodes of
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

/* What tn_grad returns for a disconnected wrt it lets through (Theano's return_disconnected). */
typedef enum tn_return_disconnected { TN_RETURN_ZERO = 0, TN_RETURN_NULL } tn_return_disconnected;

typedef struct tn_grad_options {
    int n_consider_constant;
    tn_var *const *consider_constant;  /* not backpropagated through (may still be wrt) */
    tn_disconnected disconnected_inputs;
    int n_known_grads;                 /* start from given gradients of intermediate */
    tn_var *const *known_vars;         /* variables: d cost/d known_vars[i] = known_grads[i] */
    tn_var *const *known_grads;        /* (same rank); cost may then be NULL */
    /* Theano's add_names: each gradient named "(dcost/dw)" from the cost's
       and wrt[i]'s names, when both have one */
    bool add_names;
    /* a disconnected wrt that disconnected_inputs lets through gets zeros of
       its shape (TN_RETURN_ZERO) or NULL */
    tn_return_disconnected return_disconnected;
} tn_grad_options;

/* Fills grads[0..n) with d cost / d wrt[i]; cost is a 0-d float (or NULL with
   known_grads); wrt are float variables of cost's graph. opt NULL: defaults.
   On error every grads[i] is NULL. */
TN_API tn_result tn_grad(tn_var *cost, int n, tn_var *const *wrt, tn_var **grads, const tn_grad_options *opt);
TN_API tn_var *tn_grad1(tn_var *cost, tn_var *wrt);      /* one gradient, default options; NULL on error */
TN_API tn_var *tn_stop_gradient(tn_var *x);              /* x, through which no gradient flows */
/* Forward mode: the Jacobian of f with respect to wrt[] times eval_points[]
   (each of its wrt's shape), a variable of f's shape. Elementwise, dot/gemm/
   gemv/outer, reductions, softmax, cumsum/cumprod, shape ops and transfers
   (the ops whose row has a jvp or TN_OPF_LINEAR) and custom ops with a rop;
   TN_ERR_UNSUPPORTED for the others (scan, custom ops without one). */
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

/* >>api_custom ----------------------------------------------------------- */
/* A user op (the >>custom section): a type rule, a CPU function and optionally CUDA
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
    /* CUDA C source defining the extern "C" __global__ kernel cuda_kernel
       (NULL: CPU only). With cuda_abi TN_CUSTOM_ABI_POINTERS (0) it is called
       with the inputs' then the outputs' device pointers, contiguous (strided
       inputs are copied first), then long long n (out[0]'s element count):
         void k(const float *in0, ..., float *out0, ..., long long n)
       cuda_abi TN_CUSTOM_ABI_STRIDED (cuda_abi below) passes every operand
       as it lives, strided views included. The library prepends a prelude
       to the source (tensor_cuda.h's >>cuda_user section): int64_t, tn_half
       with load_w/write_w/work_dtype, tn_operand, tn_params, tn_offset. */
    const char *cuda_source;
    const char *cuda_kernel;
    /* Launch geometry; NULL: a 1-d grid of 256-thread blocks over n. */
    void (*cuda_geometry)(const tn_custom_op *op, tn_array *const *in, tn_array *const *out,
                          unsigned grid[3], unsigned block[3]);
    void *user;
    /* Gradient (Theano's grad(inputs, output_grads)): fills gin[i] for each i
       with need[i], built with the public constructors from the node's
       inputs in[], outputs out[] and the gradients gout[] of its outputs
       (zeros where none reached an output, never NULL); gin[i] of in[i]'s
       rank (broadcast dims are summed by tn_grad), NULL meaning zero. NULL
       grad: tn_grad reports that the op has no gradient. */
    tn_result (*grad)(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                      const bool *need, tn_var **gin, char *why, size_t why_cap);
    /* R-op (Theano's R_op(inputs, eval_points)): rout[k], the derivative of
       output k along eval[] (eval[i] of in[i]'s shape, zeros where input i
       has no tangent); NULL rout[k] means zero. NULL rop: tn_rop reports it. */
    tn_result (*rop)(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *eval,
                     tn_var **rout, char *why, size_t why_cap);
    /* The kernel's signature, TN_CUSTOM_ABI_STRIDED:
         extern "C" __global__ void k(tn_operand in0, ..., tn_operand out0, ..., tn_params p)
       struct tn_operand { void *data; long long shape[8], strides[8];
                           int ndim, dtype; long long size; }
       (strides in elements, may be 0 or negative; dtype a tn_dtype; outputs
       contiguous), struct tn_params { int n; double v[16]; } holding params.
       The default geometry covers out[0]'s size; at most 16 operands. */
    int cuda_abi;
    const double *params;      /* n_params scalars (copied), for the kernel and the callbacks */
    int n_params;              /* 0..TN_CUSTOM_MAX_PARAMS */
    /* Shapes that depend on input values (the seed's GpuEye(n, m, k)): bit i
       set when the type rule reads in[i]'s value; such an input is 0-d, one
       of the first 8, and an input, a shared variable or a constant. The
       rule is then infer_values (infer may be NULL): val[i], for each bit i,
       is that value on the host, NULL where unknown (at build time, but for
       a constant); at call time every one is known. A call with new values
       is planned anew, as one with new input shapes; kernels still get every
       input as usual (the CPU function host arrays, a CUDA kernel device
       pointers). */
    unsigned value_inputs;
    tn_result (*infer_values)(const tn_custom_op *op, const tn_type *in, const tn_array *const *val, tn_type *out,
                              char *why, size_t why_cap);
};
enum { TN_CUSTOM_ABI_POINTERS = 0, TN_CUSTOM_ABI_STRIDED = 1 };
#define TN_CUSTOM_MAX_PARAMS 16
#define TN_CUSTOM_MAX_STRIDED_OPERANDS 16
/* Records the op applied to in[0..n); g may be NULL when n > 0. A one-output
   op's variable; NULL with the error set on failure (a type rule that fails
   reports "tn_custom: op 'name': ..."). */
TN_API tn_var *tn_custom(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in);
/* Several outputs: fills outs[op->n_outputs]. */
TN_API tn_result tn_custom_multi(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in, tn_var **outs);
/* The description a custom node carries (NULL for other nodes). */
TN_API const tn_custom_op *tn_custom_of(const tn_var *node);

/* >>api_scan ------------------------------------------------------------- */
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
/* Frees the compiled steps of g's scans (tn_graph_free should call it; see the >>scan section). */
TN_API void tn__scan_release_graph(tn_graph *g);

#ifdef __cplusplus
}
#endif
#endif /* TENSOR_OPS_H */

/* >>ops_implementation ===================================================== */
/* Pulled in by tensor.h's implementation, after the core it builds on. */
#if defined(TENSOR_OPS_IMPLEMENTATION_HERE) && !defined(TENSOR_OPS_IMPLEMENTATION_DONE)
#define TENSOR_OPS_IMPLEMENTATION_DONE
/* >>ops_ew ============================================================ */
/* The TN_EW_OPS table as data (names, kinds, expression text),
   the CPU elementwise engine (tn__cpu_ew_run), the type rules, labels and CPU
   entry points of every elementwise op and of COMPOSITE, and the public
   constructors (tn_add, tn_exp, ..., tn_cast). */
#include <string.h>
#include <stdarg.h>
#include <math.h>

/* >>ew_info -------------------------------------------------------------- */

/* Expression text is taken with TN_T, TN_F and TN_I undefined, so a code
   generator sees them as written and defines them itself. */
/* By op: TN_OP_NONE's empty row, then TN_EW_OPS in its order, the enum's. */
static const tn_ew_info tn__ew_infos[] = {
    { NULL, 0, 0, NULL, NULL },
#define TN__X_INFO(E, n, ar, k, fe, ie, d) { #n, ar, k, TN__XSTRINGIFY(fe), TN__XSTRINGIFY(ie) },
    TN_EW_OPS(TN__X_INFO)
#undef TN__X_INFO
};

/* The table's rows are the ops 1..TN_OP_CAST: CAST stays its last row. */
#define TN__X_ONE(E, n, ar, k, fe, ie, d) + 1
TN__STATIC_ASSERT(0 TN_EW_OPS(TN__X_ONE) == TN_OP_CAST, "TN_EW_OPS: CAST must stay the last row (elementwise ops are 1..TN_OP_CAST)");
#undef TN__X_ONE

TN_API const tn_ew_info *tn__ew_info(int op) {
    if (op <= TN_OP_NONE || op > TN_OP_CAST) return NULL;
    return &tn__ew_infos[op];
}

/* The helpers as text; their qualifier is spelled TN__QUAL, which the
   generated source defines (e.g. `#define TN__QUAL __device__ inline`). */
TN_API const char *tn__scalar_helpers_source(void) {
    return TN__XSTRINGIFY(TN__SCALAR_HELPERS(TN__QUAL));
}

TN__SCALAR_HELPERS(static inline)

static bool tn__ew_is_ew(int op) { return op > TN_OP_NONE && op <= TN_OP_CAST; }

/* >>ew_convert: scalar conversions with storage semantics ---------------- */

/* Compute types: the register type of each dtype. */
enum { TN__CT_F = 0, TN__CT_D = 1, TN__CT_I = 2 };
static int tn__ew_ct(tn_dtype t) {
    return t == TN_F16 || t == TN_F32 ? TN__CT_F : t == TN_F64 ? TN__CT_D : TN__CT_I;
}

/* float <-> half, round to nearest even (F. Giesen's float_to_half_fast3_rtne
   and half_to_float), written as selects between the paths so loops vectorise. */
static inline uint16_t tn__ew_f2h(float f) {
    uint32_t u, sign, sub, big;
    memcpy(&u, &f, 4);
    sign = u & 0x80000000u;
    u ^= sign;
    uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;   /* rebias exponent, round half even */
    float g;
    memcpy(&g, &u, 4);
    g += 0.5f;                                    /* subnormal: aligns the 10 mantissa bits; FPU rounds */
    memcpy(&sub, &g, 4);
    sub -= 0x3f000000u;
    big = u > 0x7f800000u ? 0x7e00u : 0x7c00u;    /* NaN, or inf and >= 65520 */
    uint32_t o = u >= 0x47800000u ? big : u < 0x38800000u ? sub : norm;
    return (uint16_t)(o | (sign >> 16));
}

static inline float tn__ew_h2f(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13, sub;
    uint32_t e = o & 0x0f800000u;
    o += 0x38000000u;                             /* (127 - 15) << 23 */
    uint32_t t = o + 0x00800000u;
    float f;
    memcpy(&f, &t, 4);
    f -= 6.103515625e-05f;                        /* zero, subnormal: renormalise through the FPU */
    memcpy(&sub, &f, 4);
    o = e == 0x0f800000u ? o + 0x38000000u : e == 0 ? sub : o;
    o |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &o, 4);
    return f;
}

/* double -> half without double rounding: round to odd into float first. */
static inline uint16_t tn__ew_d2h(double d) {
    double ad = fabs(d);
    if (!(ad < 65520.0)) return tn__ew_f2h((float)d);  /* inf, NaN, overflow */
    float f = (float)d;
    if ((double)f != d) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if (fabs((double)f) > ad) u -= 1;                /* toward zero */
        u |= 1u;                                         /* sticky */
        memcpy(&f, &u, 4);
    }
    return tn__ew_f2h(f);
}

/* float -> int: truncate; NaN and out of range give the type's minimum (as
   x86 and NumPy do) without C's undefined behaviour. */
static inline int64_t tn__ew_d2i64(double x) {
    return x >= -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : INT64_MIN;
}
static inline int64_t tn__ew_d2i32(double x) {
    return x > -2147483649.0 && x < 2147483648.0 ? (int64_t)(int32_t)x : (int64_t)INT32_MIN;
}
static inline int64_t tn__ew_wrap32(int64_t x) { return (int64_t)(int32_t)(uint32_t)(uint64_t)x; }

/* Storage value of a register value (cv_<ct>_<dtype>), and register value of
   a storage value (ld_<dtype>_<ct>). */
#define tn__cv_f_F16(x) tn__ew_f2h(x)
#define tn__cv_d_F16(x) tn__ew_d2h(x)
#define tn__cv_i_F16(x) tn__ew_d2h((double)(x))
#define tn__cv_f_F32(x) (x)
#define tn__cv_d_F32(x) ((float)(x))
#define tn__cv_i_F32(x) ((float)(x))
#define tn__cv_f_F64(x) ((double)(x))
#define tn__cv_d_F64(x) (x)
#define tn__cv_i_F64(x) ((double)(x))
#define tn__cv_f_I32(x) ((int32_t)tn__ew_d2i32((double)(x)))
#define tn__cv_d_I32(x) ((int32_t)tn__ew_d2i32(x))
#define tn__cv_i_I32(x) ((int32_t)tn__ew_wrap32(x))
#define tn__cv_f_I64(x) tn__ew_d2i64((double)(x))
#define tn__cv_d_I64(x) tn__ew_d2i64(x)
#define tn__cv_i_I64(x) (x)
#define tn__cv_f_BOOL(x) ((uint8_t)((x) != 0))
#define tn__cv_d_BOOL(x) ((uint8_t)((x) != 0))
#define tn__cv_i_BOOL(x) ((uint8_t)((x) != 0))

#define tn__ld_F16_f(x) tn__ew_h2f(x)
#define tn__ld_F16_d(x) ((double)tn__ew_h2f(x))
#define tn__ld_F16_i(x) tn__ew_d2i64((double)tn__ew_h2f(x))
#define tn__ld_F32_f(x) (x)
#define tn__ld_F32_d(x) ((double)(x))
#define tn__ld_F32_i(x) tn__ew_d2i64((double)(x))
#define tn__ld_F64_f(x) ((float)(x))
#define tn__ld_F64_d(x) (x)
#define tn__ld_F64_i(x) tn__ew_d2i64(x)
#define tn__ld_I32_f(x) ((float)(x))
#define tn__ld_I32_d(x) ((double)(x))
#define tn__ld_I32_i(x) ((int64_t)(x))
#define tn__ld_I64_f(x) ((float)(x))
#define tn__ld_I64_d(x) ((double)(x))
#define tn__ld_I64_i(x) (x)
#define tn__ld_BOOL_f(x) ((float)((x) != 0))
#define tn__ld_BOOL_d(x) ((double)((x) != 0))
#define tn__ld_BOOL_i(x) ((int64_t)((x) != 0))

typedef uint16_t tn__st_F16;
typedef float tn__st_F32;
typedef double tn__st_F64;
typedef int32_t tn__st_I32;
typedef int64_t tn__st_I64;
typedef uint8_t tn__st_BOOL;
typedef float tn__ct_f;
typedef double tn__ct_d;
typedef int64_t tn__ct_i;

/* Block loads and stores: contiguous, broadcast (stride 0) and strided. */
typedef void (*tn__ew_io_fn)(void *reg, char *mem, int64_t stride, int64_t n);

#define TN__DEF_LOAD(DT, CT) \
    static void tn__load_##DT##_##CT(void *reg, char *mem, int64_t s, int64_t n) { \
        tn__ct_##CT *TN__RESTRICT d = (tn__ct_##CT *)reg; \
        if (s == (int64_t)sizeof(tn__st_##DT)) { \
            const tn__st_##DT *TN__RESTRICT p = (const tn__st_##DT *)mem; \
            for (int64_t i = 0; i < n; i++) d[i] = tn__ld_##DT##_##CT(p[i]); \
        } else if (s == 0) { \
            tn__ct_##CT v = tn__ld_##DT##_##CT(*(const tn__st_##DT *)mem); \
            for (int64_t i = 0; i < n; i++) d[i] = v; \
        } else { \
            for (int64_t i = 0; i < n; i++) d[i] = tn__ld_##DT##_##CT(*(const tn__st_##DT *)(mem + i * s)); \
        } }
#define TN__DEF_STORE(DT, CT) \
    static void tn__store_##CT##_##DT(void *reg, char *mem, int64_t s, int64_t n) { \
        const tn__ct_##CT *TN__RESTRICT d = (const tn__ct_##CT *)reg; \
        if (s == (int64_t)sizeof(tn__st_##DT)) { \
            tn__st_##DT *TN__RESTRICT p = (tn__st_##DT *)mem; \
            for (int64_t i = 0; i < n; i++) p[i] = tn__cv_##CT##_##DT(d[i]); \
        } else { \
            for (int64_t i = 0; i < n; i++) *(tn__st_##DT *)(mem + i * s) = tn__cv_##CT##_##DT(d[i]); \
        } }
/* Register to register with storage semantics: the value `x` would read back
   as after being stored as DT. */
#define TN__DEF_CAST(DT, CT, CT2) \
    static void tn__cast_##CT##_##DT(int64_t n, void *TN__RESTRICT o, const void *TN__RESTRICT a, \
                                     const void *TN__RESTRICT b, const void *TN__RESTRICT c) { \
        (void)b; (void)c; \
        const tn__ct_##CT *TN__RESTRICT x = (const tn__ct_##CT *)a; \
        tn__ct_##CT2 *TN__RESTRICT y = (tn__ct_##CT2 *)o; \
        for (int64_t i = 0; i < n; i++) y[i] = tn__ld_##DT##_##CT2(tn__cv_##CT##_##DT(x[i])); }

#define TN__DEF_IO3(DT, CT2) \
    TN__DEF_LOAD(DT, f) TN__DEF_LOAD(DT, d) TN__DEF_LOAD(DT, i) \
    TN__DEF_STORE(DT, f) TN__DEF_STORE(DT, d) TN__DEF_STORE(DT, i) \
    TN__DEF_CAST(DT, f, CT2) TN__DEF_CAST(DT, d, CT2) TN__DEF_CAST(DT, i, CT2)
TN__DEF_IO3(F16, f)
TN__DEF_IO3(F32, f)
TN__DEF_IO3(F64, d)
TN__DEF_IO3(I32, i)
TN__DEF_IO3(I64, i)
TN__DEF_IO3(BOOL, i)

typedef void (*tn__ew_kfn)(int64_t n, void *TN__RESTRICT o, const void *TN__RESTRICT a,
                           const void *TN__RESTRICT b, const void *TN__RESTRICT c);

/* The dtype tables' rows, in tn_dtype's order (TN_DTYPE_NONE's empty). */
#define TN__IO_ROWS { NULL, NULL, NULL }, TN__IO_ROW(BOOL), TN__IO_ROW(I32), TN__IO_ROW(I64), \
                    TN__IO_ROW(F16), TN__IO_ROW(F32), TN__IO_ROW(F64)
TN__STATIC_ASSERT(TN_BOOL == 1 && TN_I32 == 2 && TN_I64 == 3 && TN_F16 == 4 && TN_F32 == 5 && TN_F64 == 6 && TN_DTYPE_COUNT == 7,
                  "TN__IO_ROWS lists the dtypes in tn_dtype's order");
#define TN__IO_ROW(DT) { tn__load_##DT##_f, tn__load_##DT##_d, tn__load_##DT##_i }
static const tn__ew_io_fn tn__ew_loads[TN_DTYPE_COUNT][3] = { TN__IO_ROWS };
#undef TN__IO_ROW
#define TN__IO_ROW(DT) { tn__store_f_##DT, tn__store_d_##DT, tn__store_i_##DT }
static const tn__ew_io_fn tn__ew_stores[TN_DTYPE_COUNT][3] = { TN__IO_ROWS };
#undef TN__IO_ROW
#define TN__IO_ROW(DT) { tn__cast_f_##DT, tn__cast_d_##DT, tn__cast_i_##DT }
/* [target dtype][source compute type] */
static const tn__ew_kfn tn__ew_casts[TN_DTYPE_COUNT][3] = { TN__IO_ROWS };
#undef TN__IO_ROW
#undef TN__IO_ROWS

/* A register value of `v` converted to dtype t and back (immediates). */
static void tn__ew_imm(double v, tn_dtype t, void *out) {
    tn__ew_casts[t][TN__CT_D](1, out, &v, NULL, NULL);
}

/* >>vmath: exp, expm1, log, log1p, tanh, sigmoid, softplus, erf, sin, cos - */
/* libm's expf is one call per element, and no compiler vectorises a loop of
   libm calls without -ffast-math. These are branch-free (selects, not jumps;
   float <-> bits by memcpy; no errno), so a loop of them vectorises at -O2.
   Each is a range reduction and a polynomial: exp as 2^n e^r with
   n = round(x / ln2) and r = x - n ln2 (Cody-Waite: ln2 in two parts, n times
   the first exact), e^r by Cephes' degree-7 polynomial, 2^n applied as two
   factors so that a result in the subnormal range is rounded once and one
   past FLT_MAX is inf; log as e ln2 + log(m), m in [sqrt(1/2), sqrt(2)),
   by Cephes' polynomial in m - 1. Specials (NaN, +-inf, +-0, the signs of
   zero libm keeps, x < 0 for log) are selected at the end. Worst errors
   (tests/test_vmath.c, which allows 4; README's "Numerics"; any level),
   float32 against libm in double: exp 1.00 ulp, expm1 1.41, log 0.79, log1p
   1.44, tanh 1.31, sigmoid 2.15, softplus 1.86; float64 against libm in long
   double: exp 0.95, expm1 1.83, log 0.79, log1p 1.43, tanh 1.29, sigmoid
   1.91, softplus 1.83; erf 0.51 (float32), 1.80 (float64); sin and cos 0.56
   and 0.56 (float32), 0.76 and 0.76 (float64). The float32 and float64 kernels of
   TN_EW_OPS call them through TN_F (>>ew_kernels). */
/* Inlined whole into the kernels, whose loops vectorise only so: GCC's -O2
   stops inlining a function past a size (float64 erf is past it), and a
   loop with a call stays scalar. */
#if defined(__GNUC__) || defined(__clang__)
#define TN__VM_INLINE static inline __attribute__((always_inline))
#else
#define TN__VM_INLINE static inline
#endif
/* a * b + c in the polynomials: fused, one rounding, where the kernel is
   built for FMA (fm is 1 in the AVX2+FMA and AVX-512 kernels, 0 elsewhere,
   a constant once inlined); a multiply and an add elsewhere, where fma would
   be a libm call. Written out: under -std=c11 GCC does not contract. */
#if defined(__GNUC__) || defined(__clang__)
#define TN__VM_MAF(fm, a, b, c) ((fm) ? __builtin_fmaf(a, b, c) : (a) * (b) + (c))
#define TN__VM_MA(fm, a, b, c) ((fm) ? __builtin_fma(a, b, c) : (a) * (b) + (c))
#else
#define TN__VM_MAF(fm, a, b, c) ((a) * (b) + (c))
#define TN__VM_MA(fm, a, b, c) ((a) * (b) + (c))
#endif
TN__VM_INLINE uint32_t tn__vm_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
TN__VM_INLINE float tn__vm_float(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
/* c ? a : b by masks. A ternary is a branch to GCC, which then sinks the
   arithmetic only one side uses into that side, and a loop with a float
   operation on one side of a branch is not if-converted, so not vectorised
   (except with AVX-512's masks). */
TN__VM_INLINE float tn__vm_sel(bool c, float a, float b) {
    uint32_t m = 0u - (uint32_t)c;
    return tn__vm_float((tn__vm_bits(a) & m) | (tn__vm_bits(b) & ~m));
}

/* n = round(x / ln2) as a float and r = x - n ln2; *nb = n + 256 (n in [-150, 128]). */
TN__VM_INLINE float tn__vm_reduce(float x, float *n, uint32_t *nb) {
    float k = x * 1.44269504088896341f + 12582912.0f;    /* + 1.5 * 2^23: rounds to an integer */
    *nb = tn__vm_bits(k) - 0x4b400000u + 256u;
    k -= 12582912.0f;
    *n = k;
    return (x - k * 0.693359375f) - k * -2.12194440e-4f;
}

TN__VM_INLINE float tn__vm_expf(float x, int fm) {
    float n;
    uint32_t nb;
    float r = tn__vm_reduce(x, &n, &nb), r2 = r * r;
    float p = 1.9875691500e-4f;
    p = TN__VM_MAF(fm, p, r, 1.3981999507e-3f);
    p = TN__VM_MAF(fm, p, r, 8.3334519073e-3f);
    p = TN__VM_MAF(fm, p, r, 4.1665795894e-2f);
    p = TN__VM_MAF(fm, p, r, 1.6666665459e-1f);
    p = TN__VM_MAF(fm, p, r, 5.0000001201e-1f);
    p = TN__VM_MAF(fm, p, r2, r) + 1.0f;
    uint32_t h = nb >> 1;                                   /* floor(n / 2) + 128 */
    float y = p * tn__vm_float((h - 1u) << 23) * tn__vm_float((nb - h - 1u) << 23);
    y = tn__vm_sel(x > 89.0f, INFINITY, y);                 /* e^89 is past FLT_MAX (and n past 128) */
    return tn__vm_sel(x < -104.0f, 0.0f, y);                /* e^-104 rounds to 0 (and n is below -150) */
}

/* expm1(x) = 2^n expm1(r) + 2^n - 1 = 2 (t expm1(r) + (t - 1/2)) with
   t = 2^(n-1), finite up to n = 128; expm1(r) by its Taylor series to r^8
   (|r| <= ln2 / 2: the rest is below 2^-30 r). */
TN__VM_INLINE float tn__vm_expm1f(float x, int fm) {
    float n;
    uint32_t nb;
    float r = tn__vm_reduce(x, &n, &nb), r2 = r * r;
    float p = 2.48015873e-5f;
    p = TN__VM_MAF(fm, p, r, 1.98412698e-4f);
    p = TN__VM_MAF(fm, p, r, 1.38888889e-3f);
    p = TN__VM_MAF(fm, p, r, 8.33333333e-3f);
    p = TN__VM_MAF(fm, p, r, 4.16666667e-2f);
    p = TN__VM_MAF(fm, p, r, 1.66666667e-1f);
    p = TN__VM_MAF(fm, p, r, 0.5f);
    p = TN__VM_MAF(fm, p, r2, r);
    float t = tn__vm_float((nb - 130u) << 23);
    float y = 2.0f * TN__VM_MAF(fm, t, p, t - 0.5f);
    y = tn__vm_sel(x < -30.0f, -1.0f, tn__vm_sel(x > 89.0f, INFINITY, y));   /* expm1(-30) rounds to -1 */
    return tn__vm_sel(x == 0.0f, x, y);                     /* expm1(-0) = -0 */
}

/* log(x) for x > 0 finite (subnormals included); anything else gives junk
   the callers select away. */
TN__VM_INLINE float tn__vm_logf_pos(float x, int fm) {
    bool sub = x < 1.17549435e-38f;
    float xs = x * tn__vm_sel(sub, 8388608.0f, 1.0f);      /* 2^23 */
    uint32_t t = tn__vm_bits(xs) - 0x3f3504f3u;             /* bits of sqrt(1/2): m lands in [sqrt(1/2), sqrt(2)) */
    float e = (float)((int32_t)((t ^ 0x80000000u) >> 23) - (sub ? 279 : 256));
    float f = tn__vm_float((t & 0x007fffffu) + 0x3f3504f3u) - 1.0f, z = f * f;
    float y = 7.0376836292e-2f;
    y = TN__VM_MAF(fm, y, f, -1.1514610310e-1f);
    y = TN__VM_MAF(fm, y, f, 1.1676998740e-1f);
    y = TN__VM_MAF(fm, y, f, -1.2420140846e-1f);
    y = TN__VM_MAF(fm, y, f, 1.4249322787e-1f);
    y = TN__VM_MAF(fm, y, f, -1.6668057665e-1f);
    y = TN__VM_MAF(fm, y, f, 2.0000714765e-1f);
    y = TN__VM_MAF(fm, y, f, -2.4999993993e-1f);
    y = TN__VM_MAF(fm, y, f, 3.3333331174e-1f);
    y = TN__VM_MAF(fm, y, f * z, e * -2.12194440e-4f) - 0.5f * z;
    return (f + y) + e * 0.693359375f;
}

TN__VM_INLINE float tn__vm_logf(float x, int fm) {
    float y = tn__vm_logf_pos(x, fm);
    y = tn__vm_sel(x == 0.0f, -INFINITY, tn__vm_sel(x < 0.0f, NAN, y));
    return tn__vm_sel(x == INFINITY || x != x, x, y);
}

/* log1p(x) = log(u) + (x - (u - 1)) / u, u = 1 + x: the second term is
   what rounding u lost. */
TN__VM_INLINE float tn__vm_log1pf(float x, int fm) {
    float u = 1.0f + x;
    float y = tn__vm_logf_pos(u, fm) + (x - (u - 1.0f)) / u;
    y = tn__vm_sel(x == -1.0f, -INFINITY, tn__vm_sel(x < -1.0f, NAN, y));
    return tn__vm_sel(x == INFINITY || x != x || x == 0.0f, x, y);   /* log1p(-0) = -0 */
}

/* |x| < 0.625: Cephes' odd polynomial; above, 1 - 2 / (e^2|x| + 1) (1 once
   e^2|x| overflows). The sign is x's (tanh(-0) = -0). */
TN__VM_INLINE float tn__vm_tanhf(float x, int fm) {
    float ax = tn__vm_float(tn__vm_bits(x) & 0x7fffffffu), z = ax * ax;
    float p = -5.70498872745e-3f;
    p = TN__VM_MAF(fm, p, z, 2.06390887954e-2f);
    p = TN__VM_MAF(fm, p, z, -5.37397155531e-2f);
    p = TN__VM_MAF(fm, p, z, 1.33314422036e-1f);
    p = TN__VM_MAF(fm, p, z, -3.33332819422e-1f);
    float small = TN__VM_MAF(fm, p * z, ax, ax), big = 1.0f - 2.0f / (tn__vm_expf(2.0f * ax, fm) + 1.0f);
    float y = tn__vm_sel(ax < 0.625f, small, big);
    return tn__vm_float(tn__vm_bits(y) | (tn__vm_bits(x) & 0x80000000u));
}

/* 1 / (1 + e^-x), and for x < 0 e^x / (1 + e^x): one exp of -|x|. */
TN__VM_INLINE float tn__vm_sigmoidf(float x, int fm) {
    float e = tn__vm_expf(-tn__vm_float(tn__vm_bits(x) & 0x7fffffffu), fm);
    return tn__vm_sel(x >= 0.0f, 1.0f, e) / (1.0f + e);
}

/* max(x, 0) + log1p(e^-|x|) */
TN__VM_INLINE float tn__vm_softplusf(float x, int fm) {
    float l = tn__vm_log1pf(tn__vm_expf(-tn__vm_float(tn__vm_bits(x) & 0x7fffffffu), fm), fm);
    return tn__vm_sel(x > 0.0f, x, 0.0f) + l;
}

/* The float64 versions: the same reductions and selects, wider polynomials.
   exp and expm1 share e^r - 1 by its Taylor series to r^13 (|r| <= ln2 / 2:
   the rest is below 2^-56 r), ln2 in FreeBSD msun's two parts (the first
   has 21 low zero bits, so n times it is exact); log is msun's: s = f / (2 + f),
   log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)) with its degree-14 R; tanh
   below 0.625 is Cephes' rational x + x^3 P(x^2) / Q(x^2). Exponents go in
   and out of doubles by bits only (AVX2 has no int64 <-> double conversion). */
TN__VM_INLINE uint64_t tn__vm_bitsd(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
TN__VM_INLINE double tn__vm_double(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
TN__VM_INLINE double tn__vm_seld(bool c, double a, double b) {
    uint64_t m = 0u - (uint64_t)c;
    return tn__vm_double((tn__vm_bitsd(a) & m) | (tn__vm_bitsd(b) & ~m));
}
TN__VM_INLINE double tn__vm_fabsd(double x) { return tn__vm_double(tn__vm_bitsd(x) & 0x7fffffffffffffffu); }

/* r = x - n ln2, n = round(x / ln2); *nb = n + 2048 (n in [-1076, 1025]). */
TN__VM_INLINE double tn__vm_reduced(double x, uint64_t *nb) {
    double k = x * 1.4426950408889634 + 6755399441055744.0;     /* + 1.5 * 2^52: rounds to an integer */
    *nb = tn__vm_bitsd(k) - 0x4338000000000000u + 2048u;
    k -= 6755399441055744.0;
    return (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
}

/* e^r - 1 for |r| <= ln2 / 2 */
TN__VM_INLINE double tn__vm_expm1_r(double r, int fm) {
    double p = 1.0 / 6227020800.0;                              /* 1 / 13! */
    p = TN__VM_MA(fm, p, r, 1.0 / 479001600.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 39916800.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 3628800.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 362880.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 40320.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 5040.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 720.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 120.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 24.0);
    p = TN__VM_MA(fm, p, r, 1.0 / 6.0);
    p = TN__VM_MA(fm, p, r, 0.5);
    return TN__VM_MA(fm, p, r * r, r);
}

TN__VM_INLINE double tn__vm_exp(double x, int fm) {
    uint64_t nb;
    double p = 1.0 + tn__vm_expm1_r(tn__vm_reduced(x, &nb), fm);
    uint64_t h = nb >> 1;                                       /* floor(n / 2) + 1024 */
    double y = p * tn__vm_double((h - 1u) << 52) * tn__vm_double((nb - h - 1u) << 52);
    y = tn__vm_seld(x > 710.0, INFINITY, y);                    /* e^710 is past DBL_MAX (and n past 1024) */
    return tn__vm_seld(x < -746.0, 0.0, y);                     /* e^-746 rounds to 0 (and n is below -1075) */
}

/* 2 (t expm1(r) + (t - 1/2)), t = 2^(n-1), as in float32 */
TN__VM_INLINE double tn__vm_expm1(double x, int fm) {
    uint64_t nb;
    double p = tn__vm_expm1_r(tn__vm_reduced(x, &nb), fm);
    double t = tn__vm_double((nb - 1026u) << 52);
    double y = 2.0 * TN__VM_MA(fm, t, p, t - 0.5);
    y = tn__vm_seld(x < -40.0, -1.0, tn__vm_seld(x > 710.0, INFINITY, y));    /* expm1(-40) rounds to -1 */
    return tn__vm_seld(x == 0.0, x, y);                         /* expm1(-0) = -0 */
}

/* log(x) for x > 0 finite (subnormals included), else junk */
TN__VM_INLINE double tn__vm_log_pos(double x, int fm) {
    bool sub = x < 2.2250738585072014e-308;
    double xs = x * tn__vm_seld(sub, 18014398509481984.0, 1.0);   /* 2^54 */
    uint64_t t = tn__vm_bitsd(xs) - 0x3fe6a09e667f3bcdu;         /* bits of sqrt(1/2) */
    /* e + 2048 + 2^52 as a double's bits, less 2^52 + 2048 (+ 54) */
    double e = tn__vm_double(0x4330000000000000u | ((t ^ 0x8000000000000000u) >> 52))
             - tn__vm_seld(sub, 4503599627372598.0, 4503599627372544.0);
    double f = tn__vm_double((t & 0x000fffffffffffffu) + 0x3fe6a09e667f3bcdu) - 1.0;
    double hfsq = 0.5 * f * f, s = f / (2.0 + f), z = s * s, w = z * z;
    double t1 = w * TN__VM_MA(fm, w, TN__VM_MA(fm, w, 1.531383769920937332e-01, 2.222219843214978396e-01), 3.999999999940941908e-01);
    double t2 = z * TN__VM_MA(fm, w, TN__VM_MA(fm, w, TN__VM_MA(fm, w, 1.479819860511658591e-01, 1.818357216161805012e-01),
                                               2.857142874366239149e-01), 6.666666666666735130e-01);
    return e * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + (t1 + t2)) + e * 1.90821492927058770002e-10)) - f);
}

TN__VM_INLINE double tn__vm_log(double x, int fm) {
    double y = tn__vm_log_pos(x, fm);
    y = tn__vm_seld(x == 0.0, -INFINITY, tn__vm_seld(x < 0.0, NAN, y));
    return tn__vm_seld(x == INFINITY || x != x, x, y);
}

TN__VM_INLINE double tn__vm_log1p(double x, int fm) {
    double u = 1.0 + x;
    double y = tn__vm_log_pos(u, fm) + (x - (u - 1.0)) / u;
    y = tn__vm_seld(x == -1.0, -INFINITY, tn__vm_seld(x < -1.0, NAN, y));
    return tn__vm_seld(x == INFINITY || x != x || x == 0.0, x, y);
}

TN__VM_INLINE double tn__vm_tanh(double x, int fm) {
    double ax = tn__vm_fabsd(x), z = ax * ax;
    double p = TN__VM_MA(fm, TN__VM_MA(fm, -9.64399179425052238628e-1, z, -9.92877231001918586564e1), z, -1.61468768441708447952e3);
    double q = TN__VM_MA(fm, TN__VM_MA(fm, z + 1.12811678491632931402e2, z, 2.23548839060100448583e3), z, 4.84406305325125486048e3);
    double small = TN__VM_MA(fm, ax * z, p / q, ax), big = 1.0 - 2.0 / (tn__vm_exp(2.0 * ax, fm) + 1.0);
    double y = tn__vm_seld(ax < 0.625, small, big);
    return tn__vm_double(tn__vm_bitsd(y) | (tn__vm_bitsd(x) & 0x8000000000000000u));
}

TN__VM_INLINE double tn__vm_sigmoid(double x, int fm) {
    double e = tn__vm_exp(-tn__vm_fabsd(x), fm);
    return tn__vm_seld(x >= 0.0, 1.0, e) / (1.0 + e);
}

TN__VM_INLINE double tn__vm_softplus(double x, int fm) {
    double l = tn__vm_log1p(tn__vm_exp(-tn__vm_fabsd(x), fm), fm);
    return tn__vm_seld(x > 0.0, x, 0.0) + l;
}

/* erf, sin and cos in float32 are computed in double, so the float result
   is rounded once and the polynomials need no extra-precise steps. erf:
   |x| < 1.25 x P(x^2), P of degree 8 (relative error 4e-11); 1.25 <= |x| < 4
   1 - Q(|x| - 2.625), Q of degree 15 for erfc (absolute error 4e-10); past 4,
   1 (erf(3.92) rounds to 1). P and Q are least-squares fits at 300-400
   Chebyshev nodes, in 40-digit arithmetic. */
TN__VM_INLINE float tn__vm_erff(float x, int fm) {
    double ax = tn__vm_fabsd((double)x), z = ax * ax, t = ax - 2.625;
    double p = 8.2501993597271193e-07;
    p = TN__VM_MA(fm, p, z, -1.2785143520215854e-05);
    p = TN__VM_MA(fm, p, z, 0.0001173395445644403);
    p = TN__VM_MA(fm, p, z, -0.00085193759966356955);
    p = TN__VM_MA(fm, p, z, 0.0052224200346515804);
    p = TN__VM_MA(fm, p, z, -0.02686569433539442);
    p = TN__VM_MA(fm, p, z, 0.11283784299137306);
    p = TN__VM_MA(fm, p, z, -0.37612638459140862);
    p = TN__VM_MA(fm, p, z, 1.1283791670508938);
    double q = 3.0265055661801353e-07;
    q = TN__VM_MA(fm, q, t, -2.1668991834745176e-07);
    q = TN__VM_MA(fm, q, t, -4.1001850257808995e-06);
    q = TN__VM_MA(fm, q, t, 9.0385308762427246e-06);
    q = TN__VM_MA(fm, q, t, 1.0117808335807088e-05);
    q = TN__VM_MA(fm, q, t, -7.740704326584906e-05);
    q = TN__VM_MA(fm, q, t, 0.00015286871412600943);
    q = TN__VM_MA(fm, q, t, -3.1748499283128142e-05);
    q = TN__VM_MA(fm, q, t, -0.0006810415011099662);
    q = TN__VM_MA(fm, q, t, 0.002245491338218472);
    q = TN__VM_MA(fm, q, t, -0.0042178241013804112);
    q = TN__VM_MA(fm, q, t, 0.0054146025168763171);
    q = TN__VM_MA(fm, q, t, -0.0048904343706749065);
    q = TN__VM_MA(fm, q, t, 0.0030131449850611014);
    q = TN__VM_MA(fm, q, t, -0.0011478747961340973);
    q = TN__VM_MA(fm, q, t, 0.00020537613167215414);
    double y = tn__vm_seld(ax < 1.25, ax * p, 1.0 - q);
    y = tn__vm_seld(ax >= 4.0, 1.0, y);                        /* NaN stays NaN */
    return (float)tn__vm_double(tn__vm_bitsd(y) | (tn__vm_bitsd((double)x) & 0x8000000000000000u));
}

/* sin(x + j pi/2): n = round(x 2/pi), r = x - n pi/2 with pi/2 in three
   parts (two of 25 bits, so n times them is exact for n < 2^28, and a
   double: r is good to about 2^-75), then sin or cos of r (|r| <= pi/4) by
   their Taylor series to r^9 and r^10 (the rest is below 3e-9 of the
   result), picked and signed by (n + j) mod 4. Good for |x| < 1.5 2^28;
   the kernels redo larger |x|, inf and NaN with libm (TN__VM_TRIG_LIBM). */
TN__VM_INLINE float tn__vm_sincosf(float x, uint64_t j, int fm) {
    double xd = x;
    double k = xd * 0.63661977236758138 + 6755399441055744.0;     /* + 1.5 * 2^52: rounds to an integer */
    uint64_t q = tn__vm_bitsd(k) + j;                              /* n + j in the low bits */
    k -= 6755399441055744.0;
    double r = ((xd - k * 1.5707963109016418) - k * 1.5893254712295857e-08) - k * 6.123233995736766e-17;
    double z = r * r;
    double s = TN__VM_MA(fm, z, 1.0 / 362880.0, -1.0 / 5040.0);
    s = TN__VM_MA(fm, r * z, TN__VM_MA(fm, z, TN__VM_MA(fm, z, s, 1.0 / 120.0), -1.0 / 6.0), r);
    double c = TN__VM_MA(fm, -z, 1.0 / 3628800.0, 1.0 / 40320.0);
    c = TN__VM_MA(fm, z * z, TN__VM_MA(fm, z, TN__VM_MA(fm, z, c, -1.0 / 720.0), 1.0 / 24.0), 1.0 - 0.5 * z);
    double y = tn__vm_seld(q & 1u, c, s);
    return (float)tn__vm_double(tn__vm_bitsd(y) ^ ((q & 2u) << 62));
}
TN__VM_INLINE float tn__vm_sinf(float x, int fm) { return tn__vm_sel(x == 0.0f, x, tn__vm_sincosf(x, 0, fm)); }   /* sin(-0) = -0 */
TN__VM_INLINE float tn__vm_cosf(float x, int fm) { return tn__vm_sincosf(x, 1, fm); }
/* The lanes tn__vm_sincosf leaves to libm: |x| >= 1.5 2^28, inf, NaN. */
#define TN__VM_TRIG_LIBM(x) (!(tn__vm_float(tn__vm_bits(x) & 0x7fffffffu) < 402653184.0f))
#define TN__VM_NO_LIBM(x) 0

/* erf in float64: |x| < 1 x P(x^2), P of degree 13 (relative error
   4e-17); 1 <= |x| < 6 1 - e^-x^2 Q(|x| - 3.5), Q of degree 21 for
   e^x^2 erfc(x), fitted for the absolute error of erfc (7e-18: erf near 1
   needs no more, and x^2's rounding moves e^-x^2 by less); past 6, 1
   (erf(5.93) rounds to 1). Fitted as float32's. */
TN__VM_INLINE double tn__vm_erf(double x, int fm) {
    double ax = tn__vm_fabsd(x), z = ax * ax, t = ax - 3.5;
    double p = -4.2218066361920665e-12;
    p = TN__VM_MA(fm, p, z, 8.7030776780030921e-11);
    p = TN__VM_MA(fm, p, z, -1.2162835925503698e-09);
    p = TN__VM_MA(fm, p, z, 1.4792111042608197e-08);
    p = TN__VM_MA(fm, p, z, -1.6364610647085907e-07);
    p = TN__VM_MA(fm, p, z, 1.6462043130594368e-06);
    p = TN__VM_MA(fm, p, z, -1.4925647451134325e-05);
    p = TN__VM_MA(fm, p, z, 0.0001205533289887479);
    p = TN__VM_MA(fm, p, z, -0.00085483270218420036);
    p = TN__VM_MA(fm, p, z, 0.0052239776254219194);
    p = TN__VM_MA(fm, p, z, -0.026866170645129719);
    p = TN__VM_MA(fm, p, z, 0.11283791670955119);
    p = TN__VM_MA(fm, p, z, -0.37612638903183754);
    p = TN__VM_MA(fm, p, z, 1.1283791670955126);
    double q = -2.0473015453160555e-13;
    q = TN__VM_MA(fm, q, t, -3.3501176322657769e-12);
    q = TN__VM_MA(fm, q, t, -2.4839793970171032e-11);
    q = TN__VM_MA(fm, q, t, -1.0152283437199909e-10);
    q = TN__VM_MA(fm, q, t, -2.2735294221448982e-10);
    q = TN__VM_MA(fm, q, t, -1.2378014321707553e-10);
    q = TN__VM_MA(fm, q, t, 6.9577910537713924e-10);
    q = TN__VM_MA(fm, q, t, 2.3601183797867637e-09);
    q = TN__VM_MA(fm, q, t, 1.5890216977347044e-09);
    q = TN__VM_MA(fm, q, t, 2.8956333624279884e-09);
    q = TN__VM_MA(fm, q, t, -2.356492812825039e-08);
    q = TN__VM_MA(fm, q, t, 8.0546925146468215e-08);
    q = TN__VM_MA(fm, q, t, -4.0232591599329032e-07);
    q = TN__VM_MA(fm, q, t, 1.8411387624571484e-06);
    q = TN__VM_MA(fm, q, t, -8.2345032835681878e-06);
    q = TN__VM_MA(fm, q, t, 3.6182306868697113e-05);
    q = TN__VM_MA(fm, q, t, -0.00015546966053527587);
    q = TN__VM_MA(fm, q, t, 0.00065268587246547689);
    q = TN__VM_MA(fm, q, t, -0.0026730744971237576);
    q = TN__VM_MA(fm, q, t, 0.010661133212661249);
    q = TN__VM_MA(fm, q, t, -0.041323577827895419);
    q = TN__VM_MA(fm, q, t, 0.15529365560908334);
    double y = tn__vm_seld(ax < 1.0, ax * p, 1.0 - tn__vm_exp(-z, fm) * q);
    y = tn__vm_seld(ax >= 6.0, 1.0, y);                        /* NaN stays NaN */
    return tn__vm_double(tn__vm_bitsd(y) | (tn__vm_bitsd(x) & 0x8000000000000000u));
}

/* sin(x + j pi/2) in float64: as float32's, with pi/2 in three parts of 33
   bits and a double (msun's), so n times each part but the last is exact
   for n < 2^20, and the remainder kept as a sum rh + rl of two doubles (the
   second subtraction's rounding error recovered exactly), good to about
   2^-100 of x however close x comes to a multiple of pi/2. Then sin or cos
   of rh by their Taylor series to r^17 and r^16 (the rest is below 2^-58),
   rl added through the derivative, and cos's 1 - z/2 with its rounding
   error added back (as msun). Good for |x| < 2^20; the kernels redo larger
   |x|, inf and NaN with libm (TN__VM_TRIG_LIBMD). */
TN__VM_INLINE double tn__vm_sincos(double x, uint64_t j, int fm) {
    double k = x * 0.63661977236758138 + 6755399441055744.0;      /* + 1.5 * 2^52: rounds to an integer */
    uint64_t q = tn__vm_bitsd(k) + j;                              /* n + j in the low bits */
    k -= 6755399441055744.0;
    double a = x - k * 1.5707963267341256, b = k * 6.077100506303966e-11;   /* both exact */
    double r1 = a - b, c = ((a - r1) - b) - (k * 2.0222662487111665e-21 + k * 8.4784276603689e-32);
    double rh = r1 + c, v = rh - r1, rl = (r1 - (rh - v)) + (c - v);          /* rh + rl = r1 + c exactly */
    double z = rh * rh;
    double s = TN__VM_MA(fm, z, 1.0 / 355687428096000.0, -1.0 / 1307674368000.0);
    s = TN__VM_MA(fm, z, s, 1.0 / 6227020800.0);
    s = TN__VM_MA(fm, z, s, -1.0 / 39916800.0);
    s = TN__VM_MA(fm, z, s, 1.0 / 362880.0);
    s = TN__VM_MA(fm, z, s, -1.0 / 5040.0);
    s = TN__VM_MA(fm, z, s, 1.0 / 120.0);
    s = rh + TN__VM_MA(fm, rh * z, TN__VM_MA(fm, z, s, -1.0 / 6.0), rl * (1.0 - 0.5 * z));
    double p = TN__VM_MA(fm, -z, 1.0 / 20922789888000.0, 1.0 / 87178291200.0);
    p = TN__VM_MA(fm, z, p, -1.0 / 479001600.0);
    p = TN__VM_MA(fm, z, p, 1.0 / 3628800.0);
    p = TN__VM_MA(fm, z, p, -1.0 / 40320.0);
    p = TN__VM_MA(fm, z, p, 1.0 / 720.0);
    double hz = 0.5 * z, w = 1.0 - hz;
    double co = w + (((1.0 - w) - hz) + (z * z * TN__VM_MA(fm, -z, p, 1.0 / 24.0) - rh * rl));
    double y = tn__vm_seld(q & 1u, co, s);
    return tn__vm_double(tn__vm_bitsd(y) ^ ((q & 2u) << 62));
}
TN__VM_INLINE double tn__vm_sin(double x, int fm) { return tn__vm_seld(x == 0.0, x, tn__vm_sincos(x, 0, fm)); }   /* sin(-0) = -0 */
TN__VM_INLINE double tn__vm_cos(double x, int fm) { return tn__vm_sincos(x, 1, fm); }
#define TN__VM_TRIG_LIBMD(x) (!(tn__vm_fabsd(x) < 1048576.0))

/* One-argument forms without FMA, for the baseline kernels of TN_EW_OPS. */
#define TN__VM_NOFMA(T, fn) TN__VM_INLINE T fn##_nofma(T x) { return fn(x, 0); }
TN__VM_NOFMA(float, tn__vm_expf) TN__VM_NOFMA(float, tn__vm_expm1f) TN__VM_NOFMA(float, tn__vm_logf)
TN__VM_NOFMA(float, tn__vm_log1pf) TN__VM_NOFMA(float, tn__vm_tanhf) TN__VM_NOFMA(float, tn__vm_sigmoidf)
TN__VM_NOFMA(float, tn__vm_softplusf) TN__VM_NOFMA(float, tn__vm_erff) TN__VM_NOFMA(float, tn__vm_sinf)
TN__VM_NOFMA(float, tn__vm_cosf) TN__VM_NOFMA(double, tn__vm_exp) TN__VM_NOFMA(double, tn__vm_expm1)
TN__VM_NOFMA(double, tn__vm_log) TN__VM_NOFMA(double, tn__vm_log1p) TN__VM_NOFMA(double, tn__vm_tanh)
TN__VM_NOFMA(double, tn__vm_sigmoid) TN__VM_NOFMA(double, tn__vm_softplus) TN__VM_NOFMA(double, tn__vm_erf)
TN__VM_NOFMA(double, tn__vm_sin) TN__VM_NOFMA(double, tn__vm_cos)
#undef TN__VM_NOFMA

/* The float kernels of TN_EW_OPS: TN_F(fn) is tn__vm_<fn>f_nofma (float32)
   where TN__VMF_<fn> names one, tn__vm_<fn>_nofma (float64) where
   TN__VMD_<fn> does (the probe: such a name adds a first argument, so
   TN__VM_2ND picks the function here), else libm's fn##f or fn. */
#define TN__VMF_exp ~, tn__vm_expf_nofma
#define TN__VMF_expm1 ~, tn__vm_expm1f_nofma
#define TN__VMF_log ~, tn__vm_logf_nofma
#define TN__VMF_log1p ~, tn__vm_log1pf_nofma
#define TN__VMF_tanh ~, tn__vm_tanhf_nofma
#define TN__VMF_erf ~, tn__vm_erff_nofma
#define TN__VMF_sin ~, tn__vm_sinf_nofma
#define TN__VMF_cos ~, tn__vm_cosf_nofma
#define TN__VMD_exp ~, tn__vm_exp_nofma
#define TN__VMD_expm1 ~, tn__vm_expm1_nofma
#define TN__VMD_log ~, tn__vm_log_nofma
#define TN__VMD_log1p ~, tn__vm_log1p_nofma
#define TN__VMD_tanh ~, tn__vm_tanh_nofma
#define TN__VMD_erf ~, tn__vm_erf_nofma
#define TN__VMD_sin ~, tn__vm_sin_nofma
#define TN__VMD_cos ~, tn__vm_cos_nofma
#define TN__VM_2ND_(a, b, ...) b
#define TN__VM_2ND(...) TN__VM_2ND_(__VA_ARGS__)

/* Array kernels for the rows that are one function, compiled for the
   instruction sets a vector width pays on (x86-64: SSE2, AVX2 with FMA,
   AVX-512) and picked at run time. The loop runs 16 elements at a time (a
   fixed count, which GCC's -O2 cost model vectorises; every width divides
   it), the tail through a padded block. A block where `big` holds for some
   lane has those lanes redone by `lib` (a branch per block, not per lane),
   from the input: so o and a never overlap (restrict), which the engine
   keeps, since an output overlapping an input gets a register block of its
   own (out_direct in tn__cpu_ew_run's plan); test_vmath's test_in_place
   runs every function in place to hold it to that.
   X(op, name, compute type, C type, function, big, lib). */
#define TN__VM_OPS(X) \
    X(EXP, exp, F, float, tn__vm_expf, TN__VM_NO_LIBM, expf) \
    X(EXP, exp, D, double, tn__vm_exp, TN__VM_NO_LIBM, exp) \
    X(EXPM1, expm1, F, float, tn__vm_expm1f, TN__VM_NO_LIBM, expm1f) \
    X(EXPM1, expm1, D, double, tn__vm_expm1, TN__VM_NO_LIBM, expm1) \
    X(LOG, log, F, float, tn__vm_logf, TN__VM_NO_LIBM, logf) \
    X(LOG, log, D, double, tn__vm_log, TN__VM_NO_LIBM, log) \
    X(LOG1P, log1p, F, float, tn__vm_log1pf, TN__VM_NO_LIBM, log1pf) \
    X(LOG1P, log1p, D, double, tn__vm_log1p, TN__VM_NO_LIBM, log1p) \
    X(TANH, tanh, F, float, tn__vm_tanhf, TN__VM_NO_LIBM, tanhf) \
    X(TANH, tanh, D, double, tn__vm_tanh, TN__VM_NO_LIBM, tanh) \
    X(SIGMOID, sigmoid, F, float, tn__vm_sigmoidf, TN__VM_NO_LIBM, tn__vm_sigmoidf_nofma) \
    X(SIGMOID, sigmoid, D, double, tn__vm_sigmoid, TN__VM_NO_LIBM, tn__vm_sigmoid_nofma) \
    X(SOFTPLUS, softplus, F, float, tn__vm_softplusf, TN__VM_NO_LIBM, tn__vm_softplusf_nofma) \
    X(SOFTPLUS, softplus, D, double, tn__vm_softplus, TN__VM_NO_LIBM, tn__vm_softplus_nofma) \
    X(ERF, erf, F, float, tn__vm_erff, TN__VM_NO_LIBM, erff) \
    X(ERF, erf, D, double, tn__vm_erf, TN__VM_NO_LIBM, erf) \
    X(SIN, sin, F, float, tn__vm_sinf, TN__VM_TRIG_LIBM, sinf) \
    X(SIN, sin, D, double, tn__vm_sin, TN__VM_TRIG_LIBMD, sin) \
    X(COS, cos, F, float, tn__vm_cosf, TN__VM_TRIG_LIBM, cosf) \
    X(COS, cos, D, double, tn__vm_cos, TN__VM_TRIG_LIBMD, cos)
/* A one-input kernel's head: o and a as T, b and c unused. */
#define TN__VM_KHEAD(NAME, T, ATTR) \
    ATTR static void NAME(int64_t n, void *TN__RESTRICT o_, const void *TN__RESTRICT a_, \
                          const void *TN__RESTRICT b_, const void *TN__RESTRICT c_) { \
        T *TN__RESTRICT o = (T *)o_; \
        const T *TN__RESTRICT a = (const T *)a_; \
        (void)b_; (void)c_;
#define TN__VM_KDEF(NAME, T, FN, FM, BIG, LIB, ATTR) TN__VM_KHEAD(NAME, T, ATTR) \
        int64_t i = 0; \
        for (; i + 16 <= n; i += 16) { \
            int big = 0; \
            for (int j = 0; j < 16; j++) { o[i + j] = FN(a[i + j], FM); big |= BIG(a[i + j]); } \
            if (big) \
                for (int j = 0; j < 16; j++) \
                    if (BIG(a[i + j])) o[i + j] = LIB(a[i + j]); \
        } \
        if (i == n) return; \
        T t[16]; \
        for (int j = 0; j < 16; j++) t[j] = i + j < n ? a[i + j] : 0; \
        for (int j = 0; j < 16; j++) t[j] = FN(t[j], FM); \
        for (int j = 0; i + j < n; j++) o[i + j] = BIG(a[i + j]) ? LIB(a[i + j]) : t[j]; }
#define TN__VM_K0(E, n, ct, T, fn, big, lib) TN__VM_KDEF(tn__vk_##n##_##ct##0, T, fn, 0, big, lib, )
TN__VM_OPS(TN__VM_K0)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TN__VM_K1(E, n, ct, T, fn, big, lib) TN__VM_KDEF(tn__vk_##n##_##ct##1, T, fn, 1, big, lib, __attribute__((target("avx2,fma"))))
#define TN__VM_K2(E, n, ct, T, fn, big, lib) TN__VM_KDEF(tn__vk_##n##_##ct##2, T, fn, 1, big, lib, __attribute__((target("avx512f"))))
TN__VM_OPS(TN__VM_K1)
TN__VM_OPS(TN__VM_K2)
/* sqrt: libm's sqrtf is the instruction plus a branch that sets errno for
   x < 0, so a loop of it stays scalar; the vector instruction gives the
   same bits (correctly rounded; NaN, -0 and x < 0 alike) without errno.
   The tail goes through libm. */
#include <immintrin.h>
#define TN__VM_SQRT(NAME, T, W, LOAD, SQRT, STORE, LIB, ATTR) TN__VM_KHEAD(NAME, T, ATTR) \
        int64_t i = 0; \
        for (; i + W <= n; i += W) STORE(o + i, SQRT(LOAD(a + i))); \
        for (; i < n; i++) o[i] = LIB(a[i]); }
TN__VM_SQRT(tn__vk_sqrt_F0, float, 4, _mm_loadu_ps, _mm_sqrt_ps, _mm_storeu_ps, sqrtf, )
TN__VM_SQRT(tn__vk_sqrt_D0, double, 2, _mm_loadu_pd, _mm_sqrt_pd, _mm_storeu_pd, sqrt, )
TN__VM_SQRT(tn__vk_sqrt_F1, float, 8, _mm256_loadu_ps, _mm256_sqrt_ps, _mm256_storeu_ps, sqrtf, __attribute__((target("avx2,fma"))))
TN__VM_SQRT(tn__vk_sqrt_D1, double, 4, _mm256_loadu_pd, _mm256_sqrt_pd, _mm256_storeu_pd, sqrt, __attribute__((target("avx2,fma"))))
TN__VM_SQRT(tn__vk_sqrt_F2, float, 16, _mm512_loadu_ps, _mm512_sqrt_ps, _mm512_storeu_ps, sqrtf, __attribute__((target("avx512f"))))
TN__VM_SQRT(tn__vk_sqrt_D2, double, 8, _mm512_loadu_pd, _mm512_sqrt_pd, _mm512_storeu_pd, sqrt, __attribute__((target("avx512f"))))
#undef TN__VM_SQRT
#define TN__VM_SQRT_ROWS \
    { TN_OP_SQRT, TN__CT_F, { tn__vk_sqrt_F0, tn__vk_sqrt_F1, tn__vk_sqrt_F2 } }, \
    { TN_OP_SQRT, TN__CT_D, { tn__vk_sqrt_D0, tn__vk_sqrt_D1, tn__vk_sqrt_D2 } },
#define TN__VM_ROW(E, n, ct, T, fn, big, lib) { TN_OP_##E, TN__CT_##ct, { tn__vk_##n##_##ct##0, tn__vk_##n##_##ct##1, tn__vk_##n##_##ct##2 } },
/* The best level this CPU runs: 0 SSE2, 1 AVX2 and FMA, 2 AVX-512F. */
static int tn__vm_cpu_level(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
}
#undef TN__VM_K1
#undef TN__VM_K2
#else
#define TN__VM_ROW(E, n, ct, T, fn, big, lib) { TN_OP_##E, TN__CT_##ct, { tn__vk_##n##_##ct##0, tn__vk_##n##_##ct##0, tn__vk_##n##_##ct##0 } },
#define TN__VM_SQRT_ROWS         /* the table's loop of libm's sqrt */
static int tn__vm_cpu_level(void) { return 0; }
#endif
static const struct { int op, ct; tn__ew_kfn k[3]; } tn__vm_rows[] = { TN__VM_OPS(TN__VM_ROW) TN__VM_SQRT_ROWS };
#undef TN__VM_K0
#undef TN__VM_ROW
#undef TN__VM_SQRT_ROWS
#undef TN__VM_KDEF
#undef TN__VM_KHEAD
#undef TN__VM_TRIG_LIBM
#undef TN__VM_TRIG_LIBMD
#undef TN__VM_NO_LIBM

/* The CPU's level, read once (the kernels are chosen on every call's plan). */
static pthread_once_t tn__vm_once = PTHREAD_ONCE_INIT;
static int tn__vm_best;
static void tn__vm_detect(void) { tn__vm_best = tn__vm_cpu_level(); }

TN_API int tn__vm_level(int want) {
    pthread_once(&tn__vm_once, tn__vm_detect);
    int best = tn__vm_best;
    tn__atomic_store(&tn__lib.vm_level, want < 0 ? 0 : 1 + (want < best ? want : best));
    return want < 0 || want > best ? best : want;
}

/* The level in effect: the CPU's best, or the one a test forced. */
static int tn__vm_level_now(void) {
    pthread_once(&tn__vm_once, tn__vm_detect);
    int forced = tn__atomic_load(&tn__lib.vm_level);
    return forced ? forced - 1 : tn__vm_best;
}

/* The array kernel of a float row of TN_EW_OPS in compute type ct, for the level in effect; NULL: none. */
static tn__ew_kfn tn__vm_kernel(int op, int ct) {
    int level = tn__vm_level_now();
    for (size_t i = 0; i < sizeof tn__vm_rows / sizeof tn__vm_rows[0]; i++)
        if (tn__vm_rows[i].op == op && tn__vm_rows[i].ct == ct) return tn__vm_rows[i].k[level];
    return NULL;
}

/* >>ew_kernels: the table expanded once per compute type ----------------- */
/* Each kernel runs one op over a block: o[i] = expr(a[i], b[i], c[i]).
   Output type: TN_I for comparisons and logic; the condition of WHERE is TN_I. */
#define TN__KOUT_TN_EWK_ARITH TN_T
#define TN__KOUT_TN_EWK_FLOAT TN_T
#define TN__KOUT_TN_EWK_CMP   TN_I
#define TN__KOUT_TN_EWK_LOGIC TN_I
#define TN__KOUT_TN_EWK_WHERE TN_T
#define TN__KOUT_TN_EWK_CAST  TN_T
#define TN__KA_TN_EWK_ARITH TN_T
#define TN__KA_TN_EWK_FLOAT TN_T
#define TN__KA_TN_EWK_CMP   TN_T
#define TN__KA_TN_EWK_LOGIC TN_T
#define TN__KA_TN_EWK_WHERE TN_I
#define TN__KA_TN_EWK_CAST  TN_T
#define TN__CAT3_(a, b, c) a##b##c
#define TN__CAT3(a, b, c) TN__CAT3_(a, b, c)
#define TN__KDEF(E, n, ar, k, fe, ie, d) \
    TN__KDEF_##ar(, TN__CAT3(tn__k_, n, TN__KSFX), TN__KOUT_##k, TN__KA_##k, TN__KEXPR(fe, ie))
#define TN__KHEAD(ATTR, NAME, OT, AT) \
    ATTR static void NAME(int64_t cnt, void *TN__RESTRICT o_, const void *TN__RESTRICT a_, \
                     const void *TN__RESTRICT b_, const void *TN__RESTRICT c_) { \
        OT *TN__RESTRICT o = (OT *)o_; \
        const AT *TN__RESTRICT pa = (const AT *)a_;
/* The loop runs 16 elements at a time, then the tail one by one: a loop
   of a fixed count is what GCC's -O2 cost model vectorises (a loop of
   unknown count stays scalar there); BODY(i) is one element. */
#define TN__KLOOP(BODY) { \
        int64_t i0 = 0; \
        for (; i0 + 16 <= cnt; i0 += 16) for (int j = 0; j < 16; j++) { const int64_t i = i0 + j; BODY } \
        for (int64_t i = i0; i < cnt; i++) { BODY } }
#define TN__KDEF_1(ATTR, NAME, OT, AT, EXPR) TN__KHEAD(ATTR, NAME, OT, AT) \
        (void)b_; (void)c_; \
        TN__KLOOP(const AT a = pa[i]; (void)a; o[i] = (OT)(EXPR);) }
#define TN__KDEF_2(ATTR, NAME, OT, AT, EXPR) TN__KHEAD(ATTR, NAME, OT, AT) \
        const TN_T *TN__RESTRICT pb = (const TN_T *)b_; (void)c_; \
        TN__KLOOP(const AT a = pa[i]; const TN_T b = pb[i]; (void)a; (void)b; o[i] = (OT)(EXPR);) }
#define TN__KDEF_3(ATTR, NAME, OT, AT, EXPR) TN__KHEAD(ATTR, NAME, OT, AT) \
        const TN_T *TN__RESTRICT pb = (const TN_T *)b_; const TN_T *TN__RESTRICT pc = (const TN_T *)c_; \
        TN__KLOOP(const AT a = pa[i]; const TN_T b = pb[i]; const TN_T c = pc[i]; \
                  (void)a; (void)b; (void)c; o[i] = (OT)(EXPR);) }

#define TN_I int64_t
#define TN__KEXPR(fe, ie) fe
#define TN_T float
#define TN_F(fn) TN__VM_2ND(TN__VMF_##fn, fn##f, ~)
#define TN__KSFX _f
TN_EW_OPS(TN__KDEF)
#undef TN_T
#undef TN_F
#undef TN__KSFX
#define TN_T double
#define TN_F(fn) TN__VM_2ND(TN__VMD_##fn, fn, ~)
#define TN__KSFX _d
TN_EW_OPS(TN__KDEF)
#undef TN__KEXPR
#undef TN__KSFX
#undef TN_T
#define TN__KEXPR(fe, ie) ie
#define TN_T int64_t
#define TN__KSFX _i
TN_EW_OPS(TN__KDEF)
#undef TN__KEXPR
#undef TN__KSFX
#undef TN_T

/* [op][compute type of the operands] */
static const tn__ew_kfn tn__ew_kern[TN_OP_CAST + 1][3] = {
    { NULL, NULL, NULL },    /* TN_OP_NONE; then TN_EW_OPS in its order, the enum's */
#define TN__X_KROW(E, n, ar, k, fe, ie, d) { tn__k_##n##_f, tn__k_##n##_d, tn__k_##n##_i },
    TN_EW_OPS(TN__X_KROW)
#undef TN__X_KROW
};

/* The one-instruction float rows again for AVX2 and AVX-512 (the >>vmath
   levels): there their loops run 8 or 16 floats a vector, 4 in the SSE2
   build above. Only rows that are one IEEE operation or a select (no
   a * b + c a GNU-mode build could fuse, no libm call), so every level
   gives the same bits. TN__KLV_<name> marks a row: Y, else N (the probe of
   TN__VM_2ND); TN__KLV_DEF_Y/N define its kernel or nothing, _ROW_Y/N give
   its table entry. */
#define TN__KLV_identity ~, Y
#define TN__KLV_add ~, Y
#define TN__KLV_sub ~, Y
#define TN__KLV_mul ~, Y
#define TN__KLV_true_div ~, Y
#define TN__KLV_neg ~, Y
#define TN__KLV_abs ~, Y
#define TN__KLV_sqr ~, Y
#define TN__KLV_reciprocal ~, Y
#define TN__KLV_relu ~, Y
#define TN__KLV_minimum ~, Y
#define TN__KLV_maximum ~, Y
#define TN__KLV_clip ~, Y
#define TN__KLV_IS(n) TN__VM_2ND(TN__KLV_##n, N, ~)
#define TN__KLV_DEF_Y(L, n, ar, ot, at, fe) \
    TN__KDEF_##ar(TN__KLV_ATTR_##L, TN__CAT3(tn__k_, n, TN__CAT3(_, TN__KTY, L)), ot, at, fe)
#define TN__KLV_DEF_N(L, n, ar, ot, at, fe)
#define TN__KLV_ATTR_1 __attribute__((target("avx2")))
#define TN__KLV_ATTR_2 __attribute__((target("avx512f")))
#define TN__KLV1(E, n, ar, k, fe, ie, d) TN__CAT3(TN__KLV_DEF_, TN__KLV_IS(n), )(1, n, ar, TN__KOUT_##k, TN__KA_##k, fe)
#define TN__KLV2(E, n, ar, k, fe, ie, d) TN__CAT3(TN__KLV_DEF_, TN__KLV_IS(n), )(2, n, ar, TN__KOUT_##k, TN__KA_##k, fe)
#define TN__KLV_ROW_Y(n, L) { tn__k_##n##_f##L, tn__k_##n##_d##L },
#define TN__KLV_ROW_N(n, L) { NULL, NULL },
#define TN__KLV_ROW(E, n, ar, k, fe, ie, d) TN__CAT3(TN__KLV_ROW_, TN__KLV_IS(n), )
/* TN__KTY (f, d) picks the C type and TN_F's functions */
#define TN__KT_f float
#define TN__KT_d double
#define TN__KF_f(fn) TN__VM_2ND(TN__VMF_##fn, fn##f, ~)
#define TN__KF_d(fn) TN__VM_2ND(TN__VMD_##fn, fn, ~)
#undef TN_F
#define TN_T TN__CAT3(TN__KT_, TN__KTY, )
#define TN_F(fn) TN__CAT3(TN__KF_, TN__KTY, )(fn)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TN__KTY f
TN_EW_OPS(TN__KLV1)
TN_EW_OPS(TN__KLV2)
#undef TN__KTY
#define TN__KTY d
TN_EW_OPS(TN__KLV1)
TN_EW_OPS(TN__KLV2)
#undef TN__KTY
/* [level - 1][op][float, double]; NULL: the row above serves every level */
static const tn__ew_kfn tn__ew_kern_lv[2][TN_OP_CAST + 1][2] = {
#define TN__X_KROW(E, n, ar, k, fe, ie, d) TN__KLV_ROW(E, n, ar, k, fe, ie, d)(n, 1)
    { { NULL, NULL }, TN_EW_OPS(TN__X_KROW) },
#undef TN__X_KROW
#define TN__X_KROW(E, n, ar, k, fe, ie, d) TN__KLV_ROW(E, n, ar, k, fe, ie, d)(n, 2)
    { { NULL, NULL }, TN_EW_OPS(TN__X_KROW) },
#undef TN__X_KROW
};
#endif
#undef TN__KLV_identity
#undef TN__KLV_add
#undef TN__KLV_sub
#undef TN__KLV_mul
#undef TN__KLV_true_div
#undef TN__KLV_neg
#undef TN__KLV_abs
#undef TN__KLV_sqr
#undef TN__KLV_reciprocal
#undef TN__KLV_relu
#undef TN__KLV_minimum
#undef TN__KLV_maximum
#undef TN__KLV_clip
#undef TN__KLV_IS
#undef TN__KLV_DEF_Y
#undef TN__KLV_DEF_N
#undef TN__KLV_ATTR_1
#undef TN__KLV_ATTR_2
#undef TN__KLV1
#undef TN__KLV2
#undef TN__KLV_ROW_Y
#undef TN__KLV_ROW_N
#undef TN__KLV_ROW
#undef TN__KT_f
#undef TN__KT_d
#undef TN__KF_f
#undef TN__KF_d
#undef TN_T
#undef TN_F
#undef TN_I

/* An instruction's kernel: the vector math, else the level's build of the
   row, else the row's own (the SSE2 build, and every int64 row). */
static tn__ew_kfn tn__ew_kernel(int op, int ct) {
    tn__ew_kfn vk = tn__vm_kernel(op, ct);
    if (vk) return vk;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    int level = tn__vm_level_now();
    if (level > 0 && ct != TN__CT_I && tn__ew_kern_lv[level - 1][op][ct]) return tn__ew_kern_lv[level - 1][op][ct];
#endif
    return tn__ew_kern[op][ct];
}

#undef TN__KDEF
#undef TN__KDEF_1
#undef TN__KDEF_2
#undef TN__KDEF_3
#undef TN__KLOOP
#undef TN__KHEAD
#undef TN__CAT3
#undef TN__CAT3_
#undef TN__DEF_LOAD
#undef TN__DEF_STORE
#undef TN__DEF_CAST
#undef TN__DEF_IO3

/* After an instruction: make the register hold what its dtype can store, so
   a fused program computes what the unfused ops would (int32 wraps, bool is
   0/1, float16 rounds). */
static void tn__norm_f16(int64_t n, void *TN__RESTRICT o, const void *TN__RESTRICT a, const void *TN__RESTRICT b, const void *TN__RESTRICT c) {
    (void)a; (void)b; (void)c;
    float *x = (float *)o;
    for (int64_t i = 0; i < n; i++) x[i] = tn__ew_h2f(tn__ew_f2h(x[i]));
}
static void tn__norm_i32(int64_t n, void *TN__RESTRICT o, const void *TN__RESTRICT a, const void *TN__RESTRICT b, const void *TN__RESTRICT c) {
    (void)a; (void)b; (void)c;
    int64_t *x = (int64_t *)o;
    for (int64_t i = 0; i < n; i++) x[i] = tn__ew_wrap32(x[i]);
}
static void tn__norm_bool(int64_t n, void *TN__RESTRICT o, const void *TN__RESTRICT a, const void *TN__RESTRICT b, const void *TN__RESTRICT c) {
    (void)a; (void)b; (void)c;
    int64_t *x = (int64_t *)o;
    for (int64_t i = 0; i < n; i++) x[i] = x[i] != 0;
}

/* >>ew_engine: tn__cpu_ew_run ---------------------------------------------- */
/* The broadcast iteration space is coalesced (adjacent dims merge when every
   operand's strides allow), then walked row by row; a row is processed in
   blocks: inputs are loaded into register blocks of their compute type, each
   instruction is one tight loop over the block, outputs are stored converted.
   An input whose storage is its compute type and whose row is contiguous is
   read in place; an output likewise is written in place by its instruction. */
#define TN__EW_MAX_OPERANDS 64
#define TN__EW_MAX_REGS 512
#define TN__EW_SCRATCH 4096          /* 8-byte slots of register blocks per thread */
#define TN__EW_BLOCK 256
#define TN__EW_GRAIN 32768

enum { TN__IN_LOAD = 0, TN__IN_INPLACE, TN__IN_ONCE };

/* A program's random draws (TN_OP_RANDOM, the >>random_cpu section): each
   has an index row after the operands, the element strides of its draw's
   C-order index over the iteration space (0 where the draw repeats). */
#define TN__EW_MAX_RAND 8
static bool tn__ew_rand_check(const tn_ew_program *p, int k, char *why, size_t cap);
static bool tn__ew_repr_is_ct(tn_dtype t, int ct);

/* Element strides of draw k's C-order index over an iteration space of nd
   dims (`shape`): 0 where the draw repeats its element. The draw's shape is
   the broadcast shape of the inputs in its shape_of, which broadcast into
   the iteration space. */
static void tn__ew_rand_strides(const tn_ew_program *p, int k, tn_array *const *in, int nd, const int64_t *shape, int64_t *st) {
    int64_t ds[TN_MAX_DIMS], acc = 1;
    for (int d = 0; d < nd; d++) ds[d] = 1;
    for (int i = 0; i < p->n_in && i < 64; i++) {
        if (!(p->rand[k].shape_of >> i & 1)) continue;
        for (int ad = 0; ad < in[i]->ndim; ad++)
            if (in[i]->shape[ad] != 1) ds[ad + nd - in[i]->ndim] = shape[ad + nd - in[i]->ndim];
    }
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = ds[d] == 1 ? 0 : acc;
        acc *= ds[d];
    }
}
static void tn__rnd_fill_instr(const tn_ew_program *p, int k, uint64_t seed, uint64_t calls, int64_t e0, int64_t es, int64_t n, void *dst);

typedef struct tn__ew_plan {
    const tn_ew_program *prog;
    int n_in, n_out, nreg, ndim, blk;
    int64_t shape[TN_MAX_DIMS];                      /* coalesced; the last is the row */
    int64_t st[TN__EW_MAX_OPERANDS][TN_MAX_DIMS];    /* byte strides: inputs, then outputs */
    char *base[TN__EW_MAX_OPERANDS];
    tn__ew_io_fn io[TN__EW_MAX_OPERANDS];            /* load (inputs) or store (outputs) */
    uint8_t in_mode[TN__EW_MAX_OPERANDS];
    bool out_direct[TN__EW_MAX_OPERANDS];
    int8_t regct[TN__EW_MAX_REGS];
    tn__ew_kfn fn[TN__EW_MAX_REGS];                  /* per instruction; NULL: immediate or draw */
    tn__ew_kfn norm[TN__EW_MAX_REGS];
    int n_rand;
    int16_t rand_instr[TN__EW_MAX_RAND];             /* the draws' instructions; their index rows follow the operands in st */
} tn__ew_plan;

static void tn__ew_fill_imm(void *reg, int ct, double imm, tn_dtype t, int64_t n) {
    union { float f; double d; int64_t i; } v;
    tn__ew_imm(imm, t, &v);
    for (int64_t i = 0; i < n; i++) {
        if (ct == TN__CT_F) ((float *)reg)[i] = v.f;
        else if (ct == TN__CT_D) ((double *)reg)[i] = v.d;
        else ((int64_t *)reg)[i] = v.i;
    }
}

/* A block of a draw's register: its elements' indices e0, e0 + es, ... */
static void tn__ew_rand_block(const tn__ew_plan *P, void **rp, int q, int64_t e0, int64_t es, int64_t n) {
    const tn_ew_program *prog = P->prog;
    int k = P->rand_instr[q], r = P->n_in + k;
    const tn_ew_instr *in = &prog->instr[k];
    tn_dtype t = (tn_dtype)in->dtype;
    uint64_t seed = (uint64_t)*(const int64_t *)rp[in->a], calls = (uint64_t)*(const int64_t *)rp[in->b];
    if (tn__ew_repr_is_ct(t, P->regct[r])) { tn__rnd_fill_instr(prog, k, seed, calls, e0, es, n, rp[r]); return; }
    TN__ALIGNAS(16) unsigned char st[TN__EW_BLOCK * 8];
    tn__rnd_fill_instr(prog, k, seed, calls, e0, es, n, st);
    tn__ew_loads[t][P->regct[r]](rp[r], (char *)st, (int64_t)tn_dtype_size(t), n);
}

static void tn__ew_segment(const tn__ew_plan *P, void **rp, char **p, const int64_t *ix, int64_t m) {
    const tn_ew_program *prog = P->prog;
    const int n_in = P->n_in, nd = P->ndim, nops = P->n_in + P->n_out;
    for (int64_t off = 0; off < m; off += P->blk) {
        int64_t n = m - off < P->blk ? m - off : P->blk;
        for (int i = 0; i < n_in; i++) {
            int64_t s = P->st[i][nd - 1];
            if (P->in_mode[i] == TN__IN_LOAD) P->io[i](rp[i], p[i] + off * s, s, n);
            else if (P->in_mode[i] == TN__IN_INPLACE) rp[i] = p[i] + off * s;
        }
        for (int j = 0; j < P->n_out; j++)
            if (P->out_direct[j]) rp[prog->out_reg[j]] = p[n_in + j] + off * P->st[n_in + j][nd - 1];
        for (int q = 0; q < P->n_rand; q++) {
            int64_t es = P->st[nops + q][nd - 1];
            tn__ew_rand_block(P, rp, q, ix[q] + off * es, es, n);
        }
        for (int k = 0; k < prog->n_instr; k++) {
            const tn_ew_instr *in = &prog->instr[k];
            void *o = rp[n_in + k];
            if (P->fn[k])
                P->fn[k](n, o, rp[in->a], in->b >= 0 ? rp[in->b] : NULL, in->c >= 0 ? rp[in->c] : NULL);
            if (P->norm[k]) P->norm[k](n, o, NULL, NULL, NULL);
        }
        for (int j = 0; j < P->n_out; j++) {
            if (P->out_direct[j]) continue;
            int64_t s = P->st[n_in + j][nd - 1];
            P->io[n_in + j](rp[prog->out_reg[j]], p[n_in + j] + off * s, s, n);
        }
    }
}

/* Per thread: register blocks in `scratch`, loop-invariant inputs and
   immediates loaded once. */
static void tn__ew_thread_init(const tn__ew_plan *P, double *scratch, void **rp) {
    const tn_ew_program *prog = P->prog;
    for (int r = 0; r < P->nreg; r++) rp[r] = scratch + (size_t)r * (size_t)P->blk;
    for (int i = 0; i < P->n_in; i++)
        if (P->in_mode[i] == TN__IN_ONCE) P->io[i](rp[i], P->base[i], 0, P->blk);
    for (int k = 0; k < prog->n_instr; k++)
        if (prog->instr[k].op == TN_OP_CONSTANT)
            tn__ew_fill_imm(rp[P->n_in + k], P->regct[P->n_in + k], prog->instr[k].imm, (tn_dtype)prog->instr[k].dtype, P->blk);
}

/* Tiled walk, for operands that are contiguous along the second-to-last dim
   but not the last (a transposed input): items are TN__EW_TILE rows of one
   plane, walked a column block at a time so every cache line read is used. */
#define TN__EW_TILE 16
static void tn__ew_range_tiled(void *ctx, int64_t lo, int64_t hi) {
    const tn__ew_plan *P = (const tn__ew_plan *)ctx;
    const int nops = P->n_in + P->n_out, nd = P->ndim;
    TN__ALIGNAS(64) double scratch[TN__EW_SCRATCH];
    void *rp[TN__EW_MAX_REGS];
    char *p[TN__EW_MAX_OPERANDS];
    tn__ew_thread_init(P, scratch, rp);
    int64_t R = P->shape[nd - 2], C = P->shape[nd - 1], tiles = (R + TN__EW_TILE - 1) / TN__EW_TILE;
    for (int64_t item = lo; item < hi; item++) {
        int64_t plane = item / tiles, r0 = item % tiles * TN__EW_TILE, r1 = r0 + TN__EW_TILE < R ? r0 + TN__EW_TILE : R;
        int64_t off[TN__EW_MAX_OPERANDS] = { 0 }, ix[TN__EW_MAX_RAND];
        for (int d = nd - 3; d >= 0; d--) {
            int64_t i = plane % P->shape[d];
            plane /= P->shape[d];
            for (int o = 0; o < nops + P->n_rand; o++) off[o] += i * P->st[o][d];
        }
        int64_t cb = P->blk < 32 ? P->blk : 32;    /* the lines (and pages) of each strided operand stay cached */
        for (int64_t c0 = 0; c0 < C; c0 += cb) {
            int64_t m = C - c0 < cb ? C - c0 : cb;
            for (int64_t r = r0; r < r1; r++) {
                for (int o = 0; o < nops; o++) p[o] = P->base[o] + off[o] + r * P->st[o][nd - 2] + c0 * P->st[o][nd - 1];
                for (int q = 0, o = nops; q < P->n_rand; q++, o++) ix[q] = off[o] + r * P->st[o][nd - 2] + c0 * P->st[o][nd - 1];
                tn__ew_segment(P, rp, p, ix, m);
            }
        }
    }
}

static void tn__ew_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__ew_plan *P = (const tn__ew_plan *)ctx;
    const int nops = P->n_in + P->n_out, nd = P->ndim;
    TN__ALIGNAS(64) double scratch[TN__EW_SCRATCH];
    void *rp[TN__EW_MAX_REGS];
    char *p[TN__EW_MAX_OPERANDS];
    tn__ew_thread_init(P, scratch, rp);

    int64_t inner = P->shape[nd - 1], idx[TN_MAX_DIMS] = { 0 };
    int64_t q = lo / inner, j0 = lo % inner;
    for (int d = nd - 2; d >= 0; d--) { idx[d] = q % P->shape[d]; q /= P->shape[d]; }
    for (int64_t left = hi - lo; left > 0;) {
        int64_t m = inner - j0 < left ? inner - j0 : left;
        int64_t ix[TN__EW_MAX_RAND];
        for (int o = 0; o < nops + P->n_rand; o++) {
            int64_t off = j0 * P->st[o][nd - 1];
            for (int d = 0; d < nd - 1; d++) off += idx[d] * P->st[o][d];
            if (o < nops) p[o] = P->base[o] + off;
            else ix[o - nops] = off;
        }
        tn__ew_segment(P, rp, p, ix, m);
        left -= m;
        j0 = 0;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < P->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* [lo, hi) bytes an array's elements span. */
static void tn__ew_extent(const tn_array *a, uintptr_t *lo, uintptr_t *hi) {
    intptr_t l = 0, h = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] == 0) { *lo = *hi = (uintptr_t)a->data; return; }
        intptr_t span = (intptr_t)((a->shape[d] - 1) * a->strides[d]);
        if (span < 0) l += span; else h += span;
    }
    *lo = (uintptr_t)a->data + (uintptr_t)l;
    *hi = (uintptr_t)a->data + (uintptr_t)h + tn_dtype_size(a->dtype);
}

static bool tn__ew_repr_is_ct(tn_dtype t, int ct) {
    return (t == TN_F32 && ct == TN__CT_F) || (t == TN_F64 && ct == TN__CT_D) || (t == TN_I64 && ct == TN__CT_I);
}

static const char *tn__ew_opname(int op) {
    if (op == TN_OP_CONSTANT) return "constant";
    const tn_ew_info *e = tn__ew_info(op);
    return e ? e->name : "?";
}

/* Checks the program and picks each instruction's kernel. */
static tn_result tn__ew_plan_program(tn__ew_plan *P, const tn_ew_program *prog, tn_array *const *out) {
    static const char *who = "tn__cpu_ew_run";
    static const char *ctname[3] = { "float", "double", "int64" };
    int n_in = prog->n_in, nreg = prog->n_in + prog->n_instr;
    if (n_in < 0 || prog->n_instr < 0 || prog->n_out < 1 || (n_in && !prog->in_dtype) || (prog->n_instr && !prog->instr) ||
        !prog->out_reg)
        return tn__err(TN_ERR_INTERNAL, "%s: malformed program (%d inputs, %d instructions, %d outputs)", who, n_in, prog->n_instr, prog->n_out);
    if (n_in + prog->n_out > TN__EW_MAX_OPERANDS || nreg > TN__EW_MAX_REGS)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: program too large (%d inputs + %d outputs, %d registers; at most %d operands and %d registers)",
                       who, n_in, prog->n_out, nreg, TN__EW_MAX_OPERANDS, TN__EW_MAX_REGS);
    bool read_later[TN__EW_MAX_REGS];
    memset(read_later, 0, sizeof read_later);
    P->n_rand = 0;
    for (int i = 0; i < n_in; i++) {
        if ((unsigned)prog->in_dtype[i] - 1u >= (unsigned)TN_DTYPE_COUNT - 1u)
            return tn__err(TN_ERR_INTERNAL, "%s: input %d has invalid dtype %d", who, i, (int)prog->in_dtype[i]);
        P->regct[i] = (int8_t)tn__ew_ct(prog->in_dtype[i]);
    }
    for (int k = 0; k < prog->n_instr; k++) {
        const tn_ew_instr *in = &prog->instr[k];
        int r = n_in + k;
        tn_dtype dt = (tn_dtype)in->dtype, idt = (tn_dtype)in->in_dtype;
        if ((unsigned)dt - 1u >= (unsigned)TN_DTYPE_COUNT - 1u)
            return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) has invalid dtype %d", who, k, tn__ew_opname(in->op), (int)dt);
        P->regct[r] = (int8_t)tn__ew_ct(dt);
        P->fn[k] = NULL;
        P->norm[k] = NULL;
        if (in->op == TN_OP_CONSTANT) continue;
        if (in->op == TN_OP_RANDOM) {
            char why[160];
            if (!tn__ew_rand_check(prog, k, why, sizeof why)) return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (random): %s", who, k, why);
            if (P->n_rand == TN__EW_MAX_RAND)
                return tn__err(TN_ERR_UNSUPPORTED, "%s: more than %d random draws in one program", who, TN__EW_MAX_RAND);
            P->rand_instr[P->n_rand++] = (int16_t)k;
            continue;
        }
        const tn_ew_info *e = tn__ew_info(in->op);
        if (!e) return tn__err(TN_ERR_INTERNAL, "%s: instruction %d has op %d, not an elementwise op", who, k, (int)in->op);
        int opr[3] = { in->a, in->b, in->c };
        for (int x = 0; x < 3; x++) {
            if (x < e->arity ? (opr[x] < 0 || opr[x] >= r) : opr[x] >= r)
                return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) operand %d is register %d (valid: 0..%d)", who, k, e->name, x, opr[x], r - 1);
            if (x < e->arity) read_later[opr[x]] = true;
        }
        if (e->kind == TN_EWK_CAST) {
            P->fn[k] = tn__ew_casts[dt][P->regct[in->a]];
            continue;
        }
        if ((unsigned)idt - 1u >= (unsigned)TN_DTYPE_COUNT - 1u)
            return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) has invalid operand dtype %d", who, k, e->name, (int)idt);
        int ict = tn__ew_ct(idt);
        int want_out = (e->kind == TN_EWK_CMP || e->kind == TN_EWK_LOGIC) ? TN__CT_I : ict;
        if (P->regct[r] != want_out)
            return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) computes %s but its dtype is %s", who, k, e->name, ctname[want_out], tn_dtype_name(dt));
        for (int x = 0; x < e->arity; x++) {
            int want = (e->kind == TN_EWK_WHERE && x == 0) ? TN__CT_I : ict;
            if (P->regct[opr[x]] != want)
                return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) reads register %d as %s but it holds %s", who, k, e->name, opr[x],
                               ctname[want], ctname[(int)P->regct[opr[x]]]);
        }
        P->fn[k] = tn__ew_kernel(in->op, ict);
    }
    for (int j = 0; j < prog->n_out; j++) {
        int r = prog->out_reg[j];
        if (r < 0 || r >= nreg) return tn__err(TN_ERR_INTERNAL, "%s: output %d reads register %d (valid: 0..%d)", who, j, r, nreg - 1);
        tn_dtype rdt = r < n_in ? prog->in_dtype[r] : (tn_dtype)prog->instr[r - n_in].dtype;
        if (out[j]->dtype != rdt) read_later[r] = true;     /* stored as another dtype: normalise first */
    }
    /* Normalise only registers that something reads again. */
    for (int k = 0; k < prog->n_instr; k++) {
        const tn_ew_instr *in = &prog->instr[k];
        if (!P->fn[k] || !read_later[n_in + k]) continue;
        int kind = tn__ew_info(in->op)->kind;
        if (kind == TN_EWK_CAST) continue;
        if (in->dtype == TN_F16) P->norm[k] = tn__norm_f16;
        else if (in->dtype == TN_I32 && kind != TN_EWK_CMP && kind != TN_EWK_LOGIC) P->norm[k] = tn__norm_i32;
        else if (in->dtype == TN_BOOL && kind != TN_EWK_CMP && kind != TN_EWK_LOGIC) P->norm[k] = tn__norm_bool;
    }
    P->prog = prog;
    P->n_in = n_in;
    P->n_out = prog->n_out;
    P->nreg = nreg;
    int blk = TN__EW_SCRATCH / (nreg > 0 ? nreg : 1);
    blk = blk > TN__EW_BLOCK ? TN__EW_BLOCK : blk & ~7;
    P->blk = blk;
    return TN_OK;
}

TN_API tn_result tn__cpu_ew_run(const tn_ew_program *prog, tn_array *const *in, tn_array *const *out) {
    static const char *who = "tn__cpu_ew_run";
    if (!prog || !out || (prog->n_in > 0 && !in)) return tn__err(TN_ERR_NULL, "%s: program, inputs or outputs are NULL", who);
    tn__ew_plan P;
    for (int j = 0; j < prog->n_out && j < TN__EW_MAX_OPERANDS; j++)
        if (!out[j]) return tn__err(TN_ERR_NULL, "%s: output %d is NULL", who, j);
    tn_result r = tn__ew_plan_program(&P, prog, out);
    if (r != TN_OK) return r;
    const int n_in = prog->n_in, n_out = prog->n_out, nops = n_in + n_out;
    const tn_array *arr[TN__EW_MAX_OPERANDS];
    for (int o = 0; o < nops; o++) {
        arr[o] = o < n_in ? in[o] : out[o - n_in];
        const tn_array *a = arr[o];
        if (!a) return tn__err(TN_ERR_NULL, "%s: input %d is NULL", who, o);
        if (a->device != TN_HOST)
            return tn__err(TN_ERR_DEVICE, "%s: %s %d lives on device %d; the CPU engine needs host arrays", who,
                           o < n_in ? "input" : "output", o < n_in ? o : o - n_in, a->device);
        if ((unsigned)a->dtype - 1u >= (unsigned)TN_DTYPE_COUNT - 1u || a->ndim < 0 || a->ndim > TN_MAX_DIMS)
            return tn__err(TN_ERR_INVALID, "%s: %s %d has dtype %d and ndim %d", who, o < n_in ? "input" : "output",
                           o < n_in ? o : o - n_in, (int)a->dtype, a->ndim);
    }
    /* The iteration space is the outputs' shape; inputs must broadcast to it. */
    const tn_array *o0 = out[0];
    int nd = o0->ndim;
    char b1[128], b2[128];
    for (int o = 0; o < nops; o++) {
        const tn_array *a = arr[o];
        bool ok = a->ndim <= nd && (o < n_in || a->ndim == nd);
        for (int d = 0; ok && d < a->ndim; d++) {
            int64_t s = a->shape[d], t = o0->shape[nd - a->ndim + d];
            ok = s == t || (o < n_in && s == 1);
        }
        if (!ok)
            return tn__err(TN_ERR_SHAPE, "%s: %s %d of shape %s does not broadcast to the output shape %s", who,
                           o < n_in ? "input" : "output", o < n_in ? o : o - n_in,
                           tn__shape_str(a->ndim, a->shape, b1), tn__shape_str(nd, o0->shape, b2));
    }
    int64_t total = 1;
    for (int d = 0; d < nd; d++) total *= o0->shape[d];
    if (total == 0) return TN_OK;

    /* Align (broadcast dims get stride 0), then merge dims (tn__merge_dims). */
    for (int d = 0; d < nd; d++) {
        P.shape[d] = o0->shape[d];
        for (int o = 0; o < nops; o++) {
            const tn_array *a = arr[o];
            int ad = d - (nd - a->ndim);
            P.st[o][d] = ad < 0 || a->shape[ad] == 1 ? 0 : a->strides[ad];
        }
    }
    if (nops + P.n_rand > TN__EW_MAX_OPERANDS)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: %d operands and %d random draws exceed %d", who, nops, P.n_rand, TN__EW_MAX_OPERANDS);
    for (int q = 0; q < P.n_rand; q++) {
        const tn_ew_instr *ri = &prog->instr[P.rand_instr[q]];
        if (tn_array_size(in[ri->a]) != 1 || tn_array_size(in[ri->b]) != 1)
            return tn__err(TN_ERR_SHAPE, "%s: random draw %d reads its seed and call count from inputs %d and %d, which are not single elements",
                           who, q, ri->a, ri->b);
        tn__ew_rand_strides(prog, P.rand_instr[q], in, nd, P.shape, P.st[nops + q]);
    }
    int cd = tn__merge_dims(nd, P.shape, nops + P.n_rand, P.st);
    if (cd == 0) {
        cd = 1;
        P.shape[0] = 1;
        for (int o = 0; o < nops + P.n_rand; o++) P.st[o][0] = 0;
    }
    P.ndim = cd;

    uintptr_t lo[TN__EW_MAX_OPERANDS], hi[TN__EW_MAX_OPERANDS];
    for (int o = 0; o < nops; o++) {
        const tn_array *a = arr[o];
        P.base[o] = (char *)a->data;
        tn__ew_extent(a, &lo[o], &hi[o]);
    }
    for (int i = 0; i < n_in; i++) {
        const tn_array *a = arr[i];
        int ct = P.regct[i];
        size_t es = tn_dtype_size(a->dtype);
        bool invariant = true;
        for (int d = 0; d < cd; d++) invariant = invariant && P.st[i][d] == 0;
        P.io[i] = tn__ew_loads[a->dtype][ct];
        P.in_mode[i] = TN__IN_LOAD;
        if (invariant) P.in_mode[i] = TN__IN_ONCE;
        else if (tn__ew_repr_is_ct(a->dtype, ct) && P.st[i][cd - 1] == (int64_t)es && (uintptr_t)a->data % es == 0)
            P.in_mode[i] = TN__IN_INPLACE;
    }
    bool reg_direct[TN__EW_MAX_REGS];
    memset(reg_direct, 0, (size_t)P.nreg * sizeof reg_direct[0]);
    for (int j = 0; j < n_out; j++) {
        const tn_array *a = out[j];
        int o = n_in + j, reg = prog->out_reg[j];
        int ct = P.regct[reg];
        size_t es = tn_dtype_size(a->dtype);
        P.io[o] = tn__ew_stores[a->dtype][ct];
        bool direct = reg >= n_in && prog->instr[reg - n_in].op != TN_OP_CONSTANT && !reg_direct[reg] &&
                      tn__ew_repr_is_ct(a->dtype, ct) && P.st[o][cd - 1] == (int64_t)es && (uintptr_t)a->data % es == 0;
        for (int i = 0; direct && i < n_in; i++) direct = hi[i] <= lo[o] || hi[o] <= lo[i];
        P.out_direct[j] = direct;
        if (direct) reg_direct[reg] = true;
    }
    bool tiled = false;
    for (int o = 0; cd >= 2 && o < nops; o++) {
        int64_t s1 = P.st[o][cd - 1] < 0 ? -P.st[o][cd - 1] : P.st[o][cd - 1], s2 = P.st[o][cd - 2] < 0 ? -P.st[o][cd - 2] : P.st[o][cd - 2];
        tiled = tiled || (s1 > 64 && s2 > 0 && s2 <= 16 && P.shape[cd - 1] > P.blk);
    }
    if (tiled) {
        int64_t rows = P.shape[cd - 2], items = total / (rows * P.shape[cd - 1]) * ((rows + TN__EW_TILE - 1) / TN__EW_TILE);
        int64_t grain = TN__EW_GRAIN / (TN__EW_TILE * P.shape[cd - 1]);
        tn__parallel_for(items, grain > 1 ? grain : 1, tn__ew_range_tiled, &P);
    } else if (total >= 2 * TN__EW_GRAIN) {
        tn__parallel_for(total, TN__EW_GRAIN, tn__ew_range, &P);
    } else {
        tn__ew_range(&P, 0, total);
    }
    return TN_OK;
}

/* >>ew_types: type rules ----------------------------------------------------- */

/* Names of the operands in messages: tn_where(cond, a, b), the others a, b, c. */
static const char *tn__ew_argname(int op, int i) {
    static const char *abc[3] = { "a", "b", "c" }, *where[3] = { "cond", "a", "b" };
    return i < 0 || i > 2 ? "?" : op == TN_OP_WHERE ? where[i] : abc[i];
}

/* "a 'x' (3, 4)" or "input 1 (3, 4)" */
static const char *tn__ew_operand_str(const tn_var *node, int i, const tn_type *t, char buf[200]) {
    char sb[128];
    const char *vn = node && node->in && i < node->n_in && node->in[i] ? node->in[i]->name : NULL;
    tn__sbuf b = { buf, 200, 0 };
    if (node && (node->op == TN_OP_COMPOSITE || tn__op_has(node->op, TN_OPF_PROLOGUE) || node->op == TN_OP_SIZE))
        tn__sbuf_put(&b, "input %d", i);      /* a fused program's (a reduction's prologue) */
    else tn__sbuf_put(&b, "%s", tn__ew_argname(node ? node->op : 0, i));
    if (vn) tn__sbuf_put(&b, " '%s'", vn);
    tn__sbuf_put(&b, " %s", tn__shape_str(t->ndim, t->shape, sb));
    return buf;
}

/* "b 'y' (3, 4)": a constructor's argument, by name when it has one. */
static const char *tn__ew_var_str(int op, int i, const tn_var *v, char buf[200]) {
    char sb[128];
    snprintf(buf, 200, "%s%s%s%s %s", tn__ew_argname(op, i), v->name ? " '" : "", v->name ? v->name : "",
             v->name ? "'" : "", tn__shape_str(v->type.ndim, v->type.shape, sb));
    return buf;
}

/* NumPy broadcasting of the inputs' static types (dims -1 unknown, bcast[d]
   known to be 1). The result is broadcastable where every input is. */
static tn_result tn__ew_broadcast(const tn_var *node, const char *who, int n, const tn_type *in, tn_type *out) {
    int nd = 0;
    for (int i = 0; i < n; i++) nd = in[i].ndim > nd ? in[i].ndim : nd;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;          /* 1 until an input says otherwise */
        bool all_b = true;
        int from = -1;             /* the input that fixed a non-1 size */
        for (int i = 0; i < n; i++) {
            int id = d - (nd - in[i].ndim);
            if (id < 0) continue;
            int64_t s = in[i].shape[id];
            bool b = in[i].bcast[id] || s == 1;
            if (b) continue;
            all_b = false;
            if (s < 0) { if (size == 1) size = -1; continue; }
            if (from >= 0 && s != size) {     /* a known size met another (0 included) */
                char x[200], y[200];
                return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast %s with %s", who,
                               tn__ew_operand_str(node, from, &in[from], x), tn__ew_operand_str(node, i, &in[i], y));
            }
            size = s;
            from = i;
        }
        out->shape[d] = all_b ? 1 : size;
        out->bcast[d] = all_b;
    }
    return TN_OK;
}

/* The dtype the operands of an elementwise op are computed in (before the
   kind's own rule: FLOAT makes ints float64). WHERE: of its a and b. */
static tn_dtype tn__ew_operand_dtype(int op, int n, const tn_type *in) {
    int kind = tn__ew_info(op)->kind;
    if (kind == TN_EWK_LOGIC) return TN_BOOL;
    if (kind == TN_EWK_CAST) return in[0].dtype;
    tn_dtype t = TN_DTYPE_NONE;
    for (int i = kind == TN_EWK_WHERE ? 1 : 0; i < n; i++) t = tn_dtype_promote(t, in[i].dtype);
    if (kind == TN_EWK_FLOAT && !tn_dtype_is_float(t)) t = TN_F64;
    return t;
}

static tn_dtype tn__ew_result_dtype(const tn_var *node, int n, const tn_type *in) {
    int kind = tn__ew_info(node->op)->kind;
    if (kind == TN_EWK_CMP || kind == TN_EWK_LOGIC) return TN_BOOL;
    if (kind == TN_EWK_CAST) return tn__p_cast_dtype(&node->p);
    return tn__ew_operand_dtype(node->op, n, in);
}

static tn_result tn__ew_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_ew_info *e = tn__ew_info(node->op);
    char who[48];
    snprintf(who, sizeof who, "tn_%s", e ? e->name : "?");
    if (!e || node->n_in != e->arity)
        return tn__err(TN_ERR_INTERNAL, "%s: node has %d inputs, the op takes %d", who, node->n_in, e ? e->arity : -1);
    memset(out, 0, sizeof *out);
    if (e->kind == TN_EWK_CAST && (tn__p_cast_dtype(&node->p) <= TN_DTYPE_NONE || tn__p_cast_dtype(&node->p) >= TN_DTYPE_COUNT))
        return tn__err(TN_ERR_DTYPE, "tn_cast: invalid target dtype %d", (int)tn__p_cast_dtype(&node->p));
    tn_result r = tn__ew_broadcast(node, who, node->n_in, in, out);
    if (r != TN_OK) return r;
    out->dtype = tn__ew_result_dtype(node, node->n_in, in);
    return TN_OK;
}

static tn_result tn__composite_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_ew_program *prog = (const tn_ew_program *)node->ext;
    if (!prog) return tn__err(TN_ERR_INTERNAL, "Composite: node has no program");
    if (prog->n_in != node->n_in || prog->n_out != node->n_out)
        return tn__err(TN_ERR_INTERNAL, "Composite: node has %d inputs and %d outputs, its program %d and %d",
                       node->n_in, node->n_out, prog->n_in, prog->n_out);
    tn_type t;
    memset(&t, 0, sizeof t);
    tn_result r = tn__ew_broadcast(node, "Composite", node->n_in, in, &t);
    if (r != TN_OK) return r;
    for (int j = 0; j < prog->n_out; j++) {
        out[j] = t;
        out[j].dtype = prog->out_dtype[j];
    }
    return TN_OK;
}

/* >>ew_program: programs of single nodes ------------------------------------- */

/* Room for the program of one elementwise node: up to 3 inputs, a cast per
   input whose dtype is not the operand dtype, and the op itself. */
typedef struct tn__ew_prog1 {
    const tn_var *owner;               /* the node it was built for (cache check) */
    tn_ew_program p;
    tn_dtype in_dtype[3];
    tn_ew_instr instr[4];
    int32_t out_reg[1];
    tn_dtype out_dtype[1];
    tn_ew_rand rand[1];                /* a draw's (tn__random_program) */
} tn__ew_prog1;

static bool tn__random_fusable(const tn_var *node);
static void tn__random_program(const tn_var *node, tn__ew_prog1 *s);
static const char *tn__rnd_name(int dist);

static void tn__ew_prog1_build(const tn_var *node, const tn_dtype *in_dt, tn_dtype out_dt, tn__ew_prog1 *s) {
    memset(s, 0, sizeof *s);
    s->owner = node;
    int n = node->n_in, op = node->op, kind = tn__ew_info(op)->kind;
    tn_type tys[3];
    memset(tys, 0, sizeof tys);
    for (int i = 0; i < n; i++) tys[i].dtype = in_dt[i];
    tn_dtype opd = tn__ew_operand_dtype(op, n, tys);
    int reg[3] = { 0, 0, 0 }, ni = 0;
    for (int i = 0; i < n; i++) {
        s->in_dtype[i] = in_dt[i];
        tn_dtype want = (kind == TN_EWK_WHERE && i == 0) ? TN_BOOL : opd;
        reg[i] = i;
        if (in_dt[i] != want && kind != TN_EWK_CAST) {
            s->instr[ni] = (tn_ew_instr){ .op = TN_OP_CAST, .dtype = (int8_t)want, .in_dtype = (int8_t)in_dt[i], .a = i, .b = -1, .c = -1 };
            reg[i] = n + ni++;
        }
    }
    s->instr[ni] = (tn_ew_instr){ .op = (int16_t)op, .dtype = (int8_t)out_dt, .in_dtype = (int8_t)opd,
                                  .a = reg[0], .b = n > 1 ? reg[1] : -1, .c = n > 2 ? reg[2] : -1 };
    ni++;
    s->out_reg[0] = n + ni - 1;
    s->out_dtype[0] = out_dt;
    s->p = (tn_ew_program){ n, s->in_dtype, ni, s->instr, 1, s->out_reg, s->out_dtype, NULL, NULL };
}

TN_API tn_ew_program *tn__ew_program_of(tn_var *node) {
    if (!node) { tn__err(TN_ERR_NULL, "tn__ew_program_of: node is NULL"); return NULL; }
    if (node->op == TN_OP_COMPOSITE) return (tn_ew_program *)node->ext;
    if (!tn__ew_is_ew(node->op) && !tn__random_fusable(node)) {
        tn__err(TN_ERR_INVALID, "tn__ew_program_of: op %d is not elementwise", node->op);
        return NULL;
    }
    /* ext is trusted only if it was built for this very node (a clone may copy ext). */
    if (node->ext && node->op != TN_OP_RANDOM) {
        tn__ew_prog1 *c = (tn__ew_prog1 *)((char *)node->ext - offsetof(tn__ew_prog1, p));
        if (c->owner == node) return &c->p;
    }
    tn__ew_prog1 *s = (tn__ew_prog1 *)tn__graph_alloc(node->graph, sizeof *s);
    if (!s) return NULL;
    if (node->op == TN_OP_RANDOM) {      /* its ext is its stream: the program is not cached */
        tn__random_program(node, s);
        return &s->p;
    }
    tn_dtype dts[3] = { TN_DTYPE_NONE, TN_DTYPE_NONE, TN_DTYPE_NONE };
    for (int i = 0; i < node->n_in && i < 3; i++) dts[i] = node->in[i]->type.dtype;
    tn__ew_prog1_build(node, dts, node->type.dtype, s);
    node->ext = &s->p;
    return &s->p;
}

/* >>ew_cpu ------------------------------------------------------------------- */

/* The program is built on the stack for the arrays' dtypes: nothing is cached
   or allocated, so concurrent calls are safe. */
static tn_result tn__ew_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__ew_prog1 s;
    tn_dtype dts[3] = { TN_DTYPE_NONE, TN_DTYPE_NONE, TN_DTYPE_NONE };
    for (int i = 0; i < node->n_in && i < 3; i++) {
        if (!in[i]) return tn__err(TN_ERR_NULL, "tn_%s: input %d is NULL", tn__ew_info(node->op)->name, i);
        dts[i] = in[i]->dtype;
    }
    if (!out[0]) return tn__err(TN_ERR_NULL, "tn_%s: output is NULL", tn__ew_info(node->op)->name);
    tn__ew_prog1_build(node, dts, out[0]->dtype, &s);
    return tn__cpu_ew_run(&s.p, in, out);
}

static tn_result tn__composite_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    if (!node->ext) return tn__err(TN_ERR_INTERNAL, "Composite: node has no program");
    return tn__cpu_ew_run((const tn_ew_program *)node->ext, in, out);
}

/* >>ew_labels ---------------------------------------------------------------- */

static const char *tn__ew_infix(int op) {
    switch (op) {
    case TN_OP_ADD: return "+";      case TN_OP_SUB: return "-";     case TN_OP_MUL: return "*";
    case TN_OP_TRUE_DIV: return "/"; case TN_OP_INT_DIV: return "//"; case TN_OP_MOD: return "%";
    case TN_OP_POW: return "**";     case TN_OP_LT: return "<";      case TN_OP_LE: return "<=";
    case TN_OP_GT: return ">";       case TN_OP_GE: return ">=";     case TN_OP_EQ: return "==";
    case TN_OP_NEQ: return "!=";     case TN_OP_AND: return "&";     case TN_OP_OR: return "|";
    case TN_OP_XOR: return "^";      default: return NULL;
    }
}

/* Register r of prog as an expression, Theano style: (i0 * i1), exp(i0). */
static void tn__ew_expr(const tn_ew_program *prog, int r, tn__sbuf *b) {
    if (b->len + 1 >= b->cap) return;                /* full: stop expanding shared subtrees */
    if (r < prog->n_in) { tn__sbuf_put(b, "i%d", r); return; }
    if (r - prog->n_in >= prog->n_instr) { tn__sbuf_put(b, "?"); return; }
    const tn_ew_instr *in = &prog->instr[r - prog->n_in];
    if (in->op == TN_OP_CONSTANT) {
        char v[40];
        tn__fmt_value((tn_dtype)in->dtype, in->imm, v, sizeof v);
        tn__sbuf_put(b, "%s", v);
        return;
    }
    if (in->op == TN_OP_RANDOM) {        /* random{bernoulli,draw=0}(i2): the draw of i2's shape */
        const tn_ew_rand *R = prog->rand ? &prog->rand[r - prog->n_in] : NULL;
        tn__sbuf_put(b, "random{%s,draw=%u}(", R ? tn__rnd_name(R->dist) : "?", R ? (unsigned)R->draw : 0u);
        tn__ew_expr(prog, in->c, b);
        tn__sbuf_put(b, ")");
        return;
    }
    const tn_ew_info *e = tn__ew_info(in->op);
    if (!e) { tn__sbuf_put(b, "?"); return; }
    const char *inf = tn__ew_infix(in->op);
    if (inf) {
        tn__sbuf_put(b, "(");
        tn__ew_expr(prog, in->a, b);
        tn__sbuf_put(b, " %s ", inf);
        tn__ew_expr(prog, in->b, b);
        tn__sbuf_put(b, ")");
        return;
    }
    if (in->op == TN_OP_NEG || in->op == TN_OP_NOT) {
        tn__sbuf_put(b, in->op == TN_OP_NEG ? "(-" : "(~");
        tn__ew_expr(prog, in->a, b);
        tn__sbuf_put(b, ")");
        return;
    }
    if (in->op == TN_OP_CAST) tn__sbuf_put(b, "Cast{%s}(", tn_dtype_name((tn_dtype)in->dtype));
    else tn__sbuf_put(b, "%s(", e->name);
    int opr[3] = { in->a, in->b, in->c };
    for (int x = 0; x < e->arity; x++) {
        if (x) tn__sbuf_put(b, ", ");
        tn__ew_expr(prog, opr[x], b);
    }
    tn__sbuf_put(b, ")");
}

/* "Composite{exp((i0 * i1))}"; several outputs are separated by commas. */
static void tn__ew_program_label(const tn_ew_program *prog, tn__sbuf *b) {
    tn__sbuf_put(b, "Composite{");
    for (int j = 0; j < prog->n_out; j++) {
        if (j) tn__sbuf_put(b, ", ");
        tn__ew_expr(prog, prog->out_reg[j], b);
    }
    tn__sbuf_put(b, "}");
}

static void tn__ew_label(const tn_var *node, char *buf, size_t cap) {
    if (!cap) return;
    const tn_ew_info *e = tn__ew_info(node->op);
    if (node->op == TN_OP_CAST) snprintf(buf, cap, "Elemwise{Cast{%s}}", tn_dtype_name(tn__p_cast_dtype(&node->p)));
    else snprintf(buf, cap, "Elemwise{%s,%s}", e ? e->name : "?", node->inplace ? "inplace" : "no_inplace");
}

static void tn__composite_label(const tn_var *node, char *buf, size_t cap) {
    if (!cap) return;
    tn__sbuf b = { buf, cap, 0 };
    buf[0] = 0;
    tn__sbuf_put(&b, "Elemwise{");
    if (node->ext) tn__ew_program_label((const tn_ew_program *)node->ext, &b);
    else tn__sbuf_put(&b, "Composite{?}");
    tn__sbuf_put(&b, "}");
    if (node->inplace) tn__sbuf_put(&b, "[(0, %d)]", node->inplace - 1);
}

/* >>ew_constructors ----------------------------------------------------------- */

static bool tn__ew_is_weak(const tn_var *v) {
    return (v->flags & TN_VAR_WEAK) && v->op == TN_OP_CONSTANT && v->value && v->value->ndim == 0 &&
           v->value->device == TN_HOST && (unsigned)v->value->dtype - 1u < (unsigned)TN_DTYPE_COUNT - 1u;
}

static double tn__ew_scalar_value(const tn_array *a) {
    double d;
    tn__ew_loads[a->dtype][TN__CT_D](&d, (char *)a->data, 0, 1);
    return d;
}

static tn_var *tn__ew_null_arg(const char *fn, int op, int i) {
    const char *name = tn__ew_argname(op, i);
    tn__err_null(fn, "argument %s", name);
    return NULL;
}

/* A 0-d constant of dtype t holding v (a weak literal made concrete). */
static tn_var *tn__ew_typed_const(tn_graph *g, tn_dtype t, double v, const char *fn) {
    tn_array *a = tn_array_scalar(t, v);
    if (!a) { tn__err(TN_ERR_OOM, "%s: out of memory", fn); return NULL; }
    tn_var *c = tn_constant(g, a);
    tn_array_free(a);
    return c;
}

/* The operand dtype of an elementwise op on `in`. Not quite NumPy's rule
   (README's Numerics lists where it differs): among arrays, the larger of
   two floats or of two ints, and an int or bool with a float gives that
   float (NumPy: float64 for int32/int64 with float16/float32). A weak
   literal (tn_scalar_const) takes part only by its value, and only with int
   or bool operands: a non-integral one makes them float64 (2.0 is integral:
   a literal is a double), an integral one makes bool int64 and widens int32
   when it does not fit; with floats it takes their dtype, whatever its size
   (as NumPy 2, NEP 50). Only literals: their own dtypes. */
static tn_result tn__ew_promote(int op, const char *fn, int n, tn_var *const *in, tn_dtype *out) {
    int kind = tn__ew_info(op)->kind;
    char b[200];
    if (kind == TN_EWK_LOGIC) {
        for (int i = 0; i < n; i++) {
            tn_dtype t = in[i]->type.dtype;
            bool weak = tn__ew_is_weak(in[i]);
            double v = weak ? tn__ew_scalar_value(in[i]->value) : 0;
            if (weak ? v != floor(v) : tn_dtype_is_float(t))
                return tn__err(TN_ERR_DTYPE, "%s: logical ops take bool or int inputs; %s is %s (compare it, e.g. tn_neq(x, tn_lit(x, 0)), or cast it)",
                               fn, tn__ew_var_str(op, i, in[i], b), weak ? "a float literal" : tn_dtype_name(t));
        }
        *out = TN_BOOL;
        return TN_OK;
    }
    int first = kind == TN_EWK_WHERE ? 1 : 0;
    tn_dtype t = TN_DTYPE_NONE;
    for (int i = first; i < n; i++)
        if (!tn__ew_is_weak(in[i])) t = tn_dtype_promote(t, in[i]->type.dtype);
    if (t == TN_DTYPE_NONE) {                         /* only literals: their own dtypes */
        for (int i = first; i < n; i++) t = tn_dtype_promote(t, in[i]->type.dtype);
    } else if (!tn_dtype_is_float(t)) {
        for (int i = first; i < n; i++) {
            if (!tn__ew_is_weak(in[i])) continue;
            double v = tn__ew_scalar_value(in[i]->value);
            if (v != floor(v) || !(fabs(v) < 9223372036854775808.0)) t = TN_F64;
            else if (t == TN_BOOL) t = TN_I64;
            else if (t == TN_I32 && !(v >= -2147483648.0 && v <= 2147483647.0)) t = TN_I64;
            if (tn_dtype_is_float(t)) break;
        }
    }
    if (kind == TN_EWK_FLOAT && !tn_dtype_is_float(t)) t = TN_F64;
    if (t == TN_BOOL && (op == TN_OP_SUB || op == TN_OP_NEG))
        return tn__err(TN_ERR_DTYPE, "%s: %s of bool is not supported (as in NumPy); use %s", fn,
                       op == TN_OP_SUB ? "subtraction" : "negation", op == TN_OP_SUB ? "tn_xor" : "tn_not");
    *out = t;
    return TN_OK;
}

/* Checks the arguments, promotes, inserts casts (and concrete constants for
   weak literals), then records the node. */
static tn_var *tn__ew_make(int op, const char *fn, int n, tn_var *const *in) {
    for (int i = 0; i < n; i++)
        if (!in[i]) return tn__ew_null_arg(fn, op, i);
    tn_graph *g = in[0]->graph;
    for (int i = 1; i < n; i++) {
        if (in[i]->graph != g) {
            char x[200], y[200];
            tn__err(TN_ERR_GRAPH, "%s: %s and %s belong to different graphs", fn,
                    tn__ew_var_str(op, 0, in[0], x), tn__ew_var_str(op, i, in[i], y));
            return NULL;
        }
    }
    tn_dtype t;
    if (tn__ew_promote(op, fn, n, in, &t) != TN_OK) return NULL;
    int kind = tn__ew_info(op)->kind;
    tn_var *ops[3];
    for (int i = 0; i < n; i++) {
        tn_dtype want = (kind == TN_EWK_WHERE && i == 0) || kind == TN_EWK_LOGIC ? TN_BOOL : t;
        ops[i] = in[i];
        if (in[i]->type.dtype == want) continue;
        if (tn__ew_is_weak(in[i])) ops[i] = tn__ew_typed_const(g, want, tn__ew_scalar_value(in[i]->value), fn);
        else ops[i] = tn_cast(in[i], want);
        if (!ops[i]) return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    return tn__node(g, op, n, ops, &p, NULL, fn);
}

TN_API tn_var *tn_cast(tn_var *a, tn_dtype t) {
    if (!a) return tn__ew_null_arg("tn_cast", TN_OP_CAST, 0);
    if (t == TN_DTYPE_NONE) t = tn_get_config()->floatX != TN_DTYPE_NONE ? tn_get_config()->floatX : TN_F32;
    if (t <= TN_DTYPE_NONE || t >= TN_DTYPE_COUNT) {
        tn__err(TN_ERR_DTYPE, "tn_cast: invalid dtype %d for %s%s%s", (int)t, a->name ? "'" : "a variable", a->name ? a->name : "", a->name ? "'" : "");
        return NULL;
    }
    if (a->type.dtype == t) return a;
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_cast_dtype(&p, t);
    return tn__node(a->graph, TN_OP_CAST, 1, &a, &p, NULL, "tn_cast");
}

#define TN__CTOR_1(E, n) TN_API tn_var *tn_##n(tn_var *a) { \
        tn_var *in[1] = { a }; return tn__ew_make(TN_OP_##E, "tn_" #n, 1, in); }
#define TN__CTOR_2(E, n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b) { \
        tn_var *in[2] = { a, b }; return tn__ew_make(TN_OP_##E, "tn_" #n, 2, in); }
#define TN__CTOR_3(E, n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b, tn_var *c) { \
        tn_var *in[3] = { a, b, c }; return tn__ew_make(TN_OP_##E, "tn_" #n, 3, in); }
#define TN__X_CTOR(E, n, ar, k, fe, ie, d) TN__CTOR_IF_##k(E, n, ar)
#define TN__CTOR_IF_TN_EWK_ARITH(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_FLOAT(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_CMP(E, n, ar)   TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_LOGIC(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_WHERE(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_CAST(E, n, ar)
TN_EW_OPS(TN__X_CTOR)

#undef TN__CTOR_1
#undef TN__CTOR_2
#undef TN__CTOR_3
#undef TN__X_CTOR

TN_API tn_var *tn_div(tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    return tn__ew_make(TN_OP_TRUE_DIV, "tn_div", 2, in);
}
TN_API tn_var *tn_switch(tn_var *cond, tn_var *a, tn_var *b) {
    tn_var *in[3] = { cond, a, b };
    return tn__ew_make(TN_OP_WHERE, "tn_switch", 3, in);
}
TN_API tn_var *tn_lit(tn_var *like, double value) {
    if (!like) return tn__ew_null_arg("tn_lit", TN_OP_NONE, 0);
    return tn_scalar_const(like->graph, value);
}

/* >>ew_grad: the derivative column as code --------------------------------- */
/* tn__ewd_<name>(z, i, g): g times d z / d in[i] (NULL for TN_DISCRETE rows),
   with a, b, c naming z's inputs as the column's expressions expect. */
typedef tn_var *(*tn__ewd_fn)(tn_var *z, int i, tn_var *g);
#define TN__DBODY_TN_DERIV(...) return (__VA_ARGS__);
#define TN__DBODY_TN_DISCRETE return NULL;
#define TN__X_DFN(E, n, ar, k, fe, ie, d) \
    static tn_var *tn__ewd_##n(tn_var *z, int i, tn_var *g) { \
        tn_var *a = z->in[0], *b = z->n_in > 1 ? z->in[1] : NULL, *c = z->n_in > 2 ? z->in[2] : NULL; \
        (void)a; (void)b; (void)c; (void)i; (void)g; \
        TN__DBODY_##d }
TN_EW_OPS(TN__X_DFN)
#undef TN__X_DFN
#undef TN__DBODY_TN_DERIV
#undef TN__DBODY_TN_DISCRETE

static const tn__ewd_fn tn__ew_deriv[TN_OP_CAST + 1] = {
    NULL,    /* TN_OP_NONE; then TN_EW_OPS in its order, the enum's */
#define TN__X_DROW(E, n, ar, k, fe, ie, d) tn__ewd_##n,
    TN_EW_OPS(TN__X_DROW)
#undef TN__X_DROW
};

/* Reverse mode: each needed input's gradient, summed back over the dims it
   was broadcast along. (WHERE's condition is bool: never needed.) */
static tn_result tn__ew_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    tn__ewd_fn d = tn__ew_deriv[node->op];
    for (int i = 0; i < node->n_in; i++) {
        if (!need[i] || (node->op == TN_OP_WHERE && i == 0)) continue;
        if (!(gin[i] = tn__sum_to(d(node, i, g), &node->in[i]->type))) return tn__gfail(tn__ew_info(node->op)->name, node);
    }
    return TN_OK;
}

/* Forward mode: the sum over inputs of d z / d in[i] times in[i]'s tangent. */
static tn_result tn__ew_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn__ewd_fn d = tn__ew_deriv[node->op];
    tn_var *r = NULL;
    for (int i = 0; i < node->n_in; i++) {
        if (!t[i] || (node->op == TN_OP_WHERE && i == 0)) continue;
        tn_var *c = d(node, i, t[i]);
        if (!c || !(r = tn__gadd(r, c))) return tn__gfail("a tangent", node);
    }
    if (r && r->type.dtype != node->type.dtype) r = tn_cast(r, node->type.dtype);
    /* tangents broadcast like values, but the consumer may be a reduction */
    *out = r ? tn__gbcast_like(r, node) : NULL;
    return !r || *out ? TN_OK : tn__gfail("a tangent", node);
}

/* A Composite exists only in a compiled function's private graph (the fusion
   pass makes it): tn_grad never meets one in a graph a user built. */
static tn_result tn__composite_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)g; (void)need; (void)gin;
    char nb[64];
    return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: node '%s' is a fused Composite, which only compiled functions contain: "
                   "differentiate the graph before tn_function", tn__gname(node, nb));
}

/* >>ew_rows: this part's rows of the op table (the >>ops_table section) --- */
#define TN__EW_NAME_TN_EWK_ARITH(n) #n
#define TN__EW_NAME_TN_EWK_FLOAT(n) #n
#define TN__EW_NAME_TN_EWK_CMP(n)   #n
#define TN__EW_NAME_TN_EWK_LOGIC(n) #n
#define TN__EW_NAME_TN_EWK_WHERE(n) #n
#define TN__EW_NAME_TN_EWK_CAST(n)  "Cast"
#define TN__EW_DFLAG_TN_DERIV(...)  0
#define TN__EW_DFLAG_TN_DISCRETE    TN_OPF_DISCRETE
#define TN__X_EW_ROW(E, n, ar, k, fe, ie, d) \
    { .op = TN_OP_##E, .name = TN__EW_NAME_##k(n), .kind = TN_OPK_ELEMWISE, .arity = ar, .infer = tn__ew_infer, \
                    .cpu = tn__ew_cpu, .label = tn__ew_label, .vjp = tn__ew_vjp, .jvp = tn__ew_jvp, \
                    .flags = TN_OPF_ELEMWISE | TN_OPF_INPLACE | TN__EW_DFLAG_##d },
#define TN__EW_OP_ROWS \
    TN_EW_OPS(TN__X_EW_ROW) \
    { .op = TN_OP_COMPOSITE, .name = "Composite", .kind = TN_OPK_COMPOSITE, .arity = -1, .infer = tn__composite_infer, \
                          .cpu = tn__composite_cpu, .label = tn__composite_label, .vjp = tn__composite_vjp, \
                          .flags = TN_OPF_INPLACE },

/* >>ops_reduce ======================================================== */
/* Sum, prod, mean, max, min, argmax, argmin, all, any,
   logsumexp (params: tn__p_red_mask, the reduced axes, and
   tn__p_red_keepdims) and softmax, log_softmax (tn__p_axis). Type rules, CPU
   kernels, labels, constructors, gradients.

   Kernel plan. The reduced axes are moved innermost logically (no copy):
   every output element folds one "box" of the input. Size-1 dims are dropped
   and adjacent dims merged where the strides allow, so a contiguous reduction
   becomes one run. Three shapes of loop:
     box     per output element, fold the box run by run (innermost reduced dim);
     lanes   when a kept dim is the one with the smallest stride (sum over
             axis 0 of a row-major matrix): fold whole rows into a block of
             accumulators, walking memory in order;
     split   one output, a large box: per-thread partial results, combined.
   Accumulators: double for floats (and for mean/logsumexp of ints), so a
   float32 sum of 2^24 elements is exact to float32 rounding; wrapping int64
   for int sums and products (NumPy); max/min/arg* compare exactly (int64 for
   ints). NaN propagates through max/min; argmax/argmin give the first NaN, or
   else the first extremum.
   logsumexp subtracts the max m: m + log(sum exp(x - m)); when m is not finite
   (every element -inf, a +inf, or a NaN) the result is m itself, so an all
   -inf row gives -inf without computing -inf - -inf. softmax uses the same
   max; a row with no finite maximum gives NaN (0/0) as SciPy and PyTorch do.

   Prologue (node->ext, set by the fusion pass): a tn_ew_program whose output 0
   is the reduction's input, computed from the node's inputs (broadcast). The
   box loop evaluates it run by run into a stack scratch buffer with
   tn__cpu_ew_run, so the fused input is never materialised. Limits: up to
   TN__RED_MAX_SRC inputs, output 0 only, the box loop only (no lanes/split
   shortcuts yet), none for softmax (its kind is TN_OPK_OTHER: it has an axis, not a mask).
   Epilogue (the prologue program's epi, set by the fusion pass): an
   elementwise program applied to each result, as the elementwise node the
   fusion pass took in would (`b - 0.1 * sum(g)` is one node). Its input 0 is
   the result stored in the reduction's dtype, its other inputs are the
   node's inputs after the prologue's, of the output's rank (a reduced axis
   kept with keepdims is 1 in each). A prologue that only passes in[0]
   through (tn__ew_program_is_identity) stands for none. The output has the
   broadcast shape of the reduction's and the epilogue's inputs; where an
   epilogue input widens a kept dim of 1 the box is folded again for each
   element, as the unfused graph broadcast the one result. The CPU kernel
   stores the results in the output's buffer (elements of the same size; a
   scratch block otherwise) and runs the epilogue over them with
   tn__cpu_ew_run; the GPU's applies it as it stores each result.
   softmax may run in place (y aliasing x, same dtype and layout): each
   element is read before it is written. */
#include <math.h>
#include <string.h>

/* >>reduce_kinds: fold kinds of the kernel */
/* One row per fold kind: its init values and its steps, compiled into the CPU
   kernels below and pasted, as text (tn__rfold_src), into the reduction
   kernels tensor_cuda.h generates, so CPU and GPU fold alike. A step's names:
   D the float accumulator (double on the CPU, float or double on the GPU), I
   the integer one (int64_t; the flag of all/any in both variants), G the index
   argmax keeps, v the element (double in the float variant, an integer in the
   int variant), K its index in the reduced box; a combine step folds a
   partial (BD, BI, BG: a later part of the box) into D, I, G. The float
   variant runs for float data and for kinds that read ints as double (mean,
   logsumexp). Argmax prefers NaN, then the extremum, then the smaller index
   (partials combine in any order on the GPU). logsumexp's two CPU passes
   (lse1: the max, lse2: sum of exp(v - MV)) are the CPU's own: the GPU folds
   an online max and sum (the >>cuda_reduce section).
   X(ENUM, name, init D, init I, step float, step int, combine float, combine int) */
#define TN__RFOLDS(X) \
    X(SUM,    sum,    0,          0,                            D += v, \
      I = (int64_t)((uint64_t)I + (uint64_t)v),                 D += BD, I = (int64_t)((uint64_t)I + (uint64_t)BI)) \
    X(PROD,   prod,   1,          1,                            D *= v, \
      I = (int64_t)((uint64_t)I * (uint64_t)v),                 D *= BD, I = (int64_t)((uint64_t)I * (uint64_t)BI)) \
    X(MEAN,   mean,   0,          0,                            D += v, (void)v, D += BD, (void)BI) \
    X(MAX,    max,    -TN__RINF,  (-9223372036854775807LL - 1), if (v > D || v != v) D = v, if (v > I) I = v, \
      if (BD > D || BD != BD) D = BD,                           if (BI > I) I = BI) \
    X(MIN,    min,    TN__RINF,   9223372036854775807LL,        if (v < D || v != v) D = v, if (v < I) I = v, \
      if (BD < D || BD != BD) D = BD,                           if (BI < I) I = BI) \
    X(ARGMAX, argmax, -TN__RINF,  (-9223372036854775807LL - 1), \
      if (v != v ? (D == D || K < G) : (D == D && (v > D || (v == D && K < G)))) { D = v; G = K; }, \
      if (v > I || (v == I && K < G)) { I = v; G = K; }, \
      if (BD != BD ? (D == D || BG < G) : (D == D && (BD > D || (BD == D && BG < G)))) { D = BD; G = BG; }, \
      if (BI > I || (BI == I && BG < G)) { I = BI; G = BG; }) \
    X(ARGMIN, argmin, TN__RINF,   9223372036854775807LL, \
      if (v != v ? (D == D || K < G) : (D == D && (v < D || (v == D && K < G)))) { D = v; G = K; }, \
      if (v < I || (v == I && K < G)) { I = v; G = K; }, \
      if (BD != BD ? (D == D || BG < G) : (D == D && (BD < D || (BD == D && BG < G)))) { D = BD; G = BG; }, \
      if (BI < I || (BI == I && BG < G)) { I = BI; G = BG; }) \
    X(ALL,    all,    0,          1,                            I &= (v != 0), I &= (v != 0), I &= BI, I &= BI) \
    X(ANY,    any,    0,          0,                            I |= (v != 0), I |= (v != 0), I |= BI, I |= BI) \
    X(LSE1,   lse1,   -TN__RINF,  (-9223372036854775807LL - 1), if (v > D || v != v) D = v, (void)v, \
      if (BD > D || BD != BD) D = BD,                           (void)BI) \
    X(LSE2,   lse2,   0,          0,                            D += EXPFN(v - MV), (void)v, D += BD, (void)BI)
#define TN__RINF ((double)INFINITY)

#define TN__RK_ENUM(E, ...) TN__RK_##E,
enum { TN__RFOLDS(TN__RK_ENUM) TN__RK_COUNT };
#undef TN__RK_ENUM

/* The table as text, for the CUDA code generator. */
typedef struct tn__rfold_text { const char *name, *init_d, *init_i, *step_f, *step_i, *comb_f, *comb_i; } tn__rfold_text;
#define TN__RFOLD_TEXT(E, n, id, ii, sf, si, cf, ci) { #n, #id, #ii, #sf, #si, #cf, #ci },
static const tn__rfold_text tn__rfold_src[TN__RK_COUNT] = { TN__RFOLDS(TN__RFOLD_TEXT) };
#undef TN__RFOLD_TEXT

/* One accumulator: d for float folds, i for int folds and all/any, g the
   argmax index, m the max subtracted by logsumexp's second pass. */
typedef struct tn__racc { double d, m; int64_t i, g; } tn__racc;

/* Folds n elements at p (byte stride s) into one accumulator; k0 is the flat
   index of the first within the reduced box (for argmax). */
typedef void (*tn__rfold1_fn)(tn__racc *a, const char *p, int64_t n, int64_t s, int64_t k0);
#define TN__RED_LANES 256      /* accumulators per block in the lanes loop */
/* A block of accumulators, one array per field so the lanes loop streams. */
typedef struct tn__rlanes { double d[TN__RED_LANES], m[TN__RED_LANES]; int64_t i[TN__RED_LANES], g[TN__RED_LANES]; } tn__rlanes;
/* Folds element j of n (byte stride s) into lane j; k is their index. */
typedef void (*tn__rfoldl_fn)(tn__rlanes *a, const char *p, int64_t n, int64_t s, int64_t k);

/* FORCEF: the fold reads ints as double (mean, logsumexp). */
#define TN__RFORCEF_sum 0
#define TN__RFORCEF_prod 0
#define TN__RFORCEF_mean 1
#define TN__RFORCEF_max 0
#define TN__RFORCEF_min 0
#define TN__RFORCEF_argmax 0
#define TN__RFORCEF_argmin 0
#define TN__RFORCEF_all 0
#define TN__RFORCEF_any 0
#define TN__RFORCEF_lse1 1
#define TN__RFORCEF_lse2 1

/* KIND: 0 value in D or I by class, 1 boolean in I (all/any), 2 also an index in G. */
#define TN__RKIND_sum 0
#define TN__RKIND_prod 0
#define TN__RKIND_mean 0
#define TN__RKIND_max 0
#define TN__RKIND_min 0
#define TN__RKIND_argmax 2
#define TN__RKIND_argmin 2
#define TN__RKIND_all 1
#define TN__RKIND_any 1
#define TN__RKIND_lse1 0
#define TN__RKIND_lse2 0
/* MAXLIKE: the contiguous float loop may use partial extrema (1 max, 2 min). */
#define TN__RMAXLIKE_sum 0
#define TN__RMAXLIKE_prod 0
#define TN__RMAXLIKE_mean 0
#define TN__RMAXLIKE_max 1
#define TN__RMAXLIKE_min 2
#define TN__RMAXLIKE_argmax 0
#define TN__RMAXLIKE_argmin 0
#define TN__RMAXLIKE_all 0
#define TN__RMAXLIKE_any 0
#define TN__RMAXLIKE_lse1 1
#define TN__RMAXLIKE_lse2 0

/* exp for logsumexp's terms: float precision is enough for float16/float32 data. */
static double tn__rexp_d(double z) { return exp(z); }
static double tn__rexp_f(double z) { return (double)expf((float)z); }

/* SUMLIKE: the contiguous float loop may use partial sums. */
#define TN__RSUMLIKE_sum 1
#define TN__RSUMLIKE_mean 1
#define TN__RSUMLIKE_prod 0
#define TN__RSUMLIKE_max 0
#define TN__RSUMLIKE_min 0
#define TN__RSUMLIKE_argmax 0
#define TN__RSUMLIKE_argmin 0
#define TN__RSUMLIKE_all 0
#define TN__RSUMLIKE_any 0
#define TN__RSUMLIKE_lse1 0
#define TN__RSUMLIKE_lse2 0

#define TN__RELEM(OP, ISF, LF, LI, SF, SI) \
    if (ISF || TN__RFORCEF_##OP) { double v = (LF); SF; } \
    else { int64_t v = (LI); SI; }

#define TN__RFL(OP, ISF) (ISF || TN__RFORCEF_##OP)
#define TN__RFOLD_T(OP, SUF, T, ISF, LF, LI, EXPF, SF, SI) \
static void tn__rf1_##OP##_##SUF(tn__racc *a, const char *p, int64_t n, int64_t s, int64_t k0) { \
    double (*const EXPFN)(double) = EXPF; \
    double D = a->d; int64_t I = a->i, G = a->g; const double MV = a->m; \
    (void)MV; (void)k0; (void)EXPFN; \
    if (s == (int64_t)sizeof(T)) { \
        const T *q = (const T *)(const void *)p; \
        int64_t j = 0; \
        if (TN__RFL(OP, ISF) && TN__RSUMLIKE_##OP) { \
            /* four partial sums: independent chains the CPU can overlap */ \
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0; \
            for (; j + 4 <= n; j += 4) { \
                T x = q[j]; s0 += (LF); x = q[j + 1]; s1 += (LF); \
                x = q[j + 2]; s2 += (LF); x = q[j + 3]; s3 += (LF); \
            } \
            D += (s0 + s1) + (s2 + s3); \
        } \
        if (TN__RFL(OP, ISF) && TN__RMAXLIKE_##OP && n >= 8) { \
            /* four partial extrema; NaN wins in any of them */ \
            double m0 = D, m1 = D, m2 = D, m3 = D; \
            for (; j + 4 <= n; j += 4) { \
                double v0, v1, v2, v3; T x = q[j]; v0 = (LF); x = q[j + 1]; v1 = (LF); \
                x = q[j + 2]; v2 = (LF); x = q[j + 3]; v3 = (LF); \
                if (TN__RMAXLIKE_##OP == 1) { \
                    m0 = (v0 > m0 || v0 != v0) ? v0 : m0; m1 = (v1 > m1 || v1 != v1) ? v1 : m1; \
                    m2 = (v2 > m2 || v2 != v2) ? v2 : m2; m3 = (v3 > m3 || v3 != v3) ? v3 : m3; \
                } else { \
                    m0 = (v0 < m0 || v0 != v0) ? v0 : m0; m1 = (v1 < m1 || v1 != v1) ? v1 : m1; \
                    m2 = (v2 < m2 || v2 != v2) ? v2 : m2; m3 = (v3 < m3 || v3 != v3) ? v3 : m3; \
                } \
            } \
            const int64_t K = 0; (void)K;   /* unused: extrema carry no index */ \
            { double v = m0; SF; } { double v = m1; SF; } \
            { double v = m2; SF; } { double v = m3; SF; } \
        } \
        for (; j < n; j++) { T x = q[j]; const int64_t K = k0 + j; (void)K; TN__RELEM(OP, ISF, LF, LI, SF, SI) } \
    } else { \
        for (int64_t j = 0; j < n; j++) { \
            T x = *(const T *)(const void *)(p + j * s); const int64_t K = k0 + j; (void)K; \
            TN__RELEM(OP, ISF, LF, LI, SF, SI) \
        } \
    } \
    a->d = D; a->i = I; a->g = G; \
} \
static void tn__rfl_##OP##_##SUF(tn__rlanes *a, const char *p, int64_t n, int64_t s, int64_t K) { \
    double (*const EXPFN)(double) = EXPF; \
    double *TN__RESTRICT Da = a->d; const double *TN__RESTRICT Ma = a->m; \
    int64_t *TN__RESTRICT Ia = a->i, *TN__RESTRICT Ga = a->g; \
    (void)K; (void)EXPFN; \
    if (s == (int64_t)sizeof(T)) { \
        const T *TN__RESTRICT q = (const T *)(const void *)p; \
        int64_t j = 0; \
        for (; j + 4 <= n; j += 4) { /* four independent lanes per step */ \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) } j++; \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) } j++; \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) } j++; \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) } j -= 3; \
        } \
        for (; j < n; j++) { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) } \
    } else { \
        for (int64_t j = 0; j < n; j++) { T x = *(const T *)(const void *)(p + j * s); TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) } \
    } \
}
/* Loads and stores only the fields the fold uses, so the loop can stream. */
#define TN__RLANE_BODY(OP, ISF, LF, LI, SF, SI) { \
    double D = Da[j]; int64_t I = Ia[j], G = TN__RKIND_##OP == 2 ? Ga[j] : 0; \
    const double MV = TN__RK_##OP##_USES_M ? Ma[j] : 0; (void)MV; (void)G; \
    TN__RELEM(OP, ISF, LF, LI, SF, SI) \
    if (TN__RFL(OP, ISF) && TN__RKIND_##OP != 1) Da[j] = D; \
    if (!TN__RFL(OP, ISF) || TN__RKIND_##OP != 0) Ia[j] = I; \
    if (TN__RKIND_##OP == 2) Ga[j] = G; }
#define TN__RK_sum_USES_M 0
#define TN__RK_prod_USES_M 0
#define TN__RK_mean_USES_M 0
#define TN__RK_max_USES_M 0
#define TN__RK_min_USES_M 0
#define TN__RK_argmax_USES_M 0
#define TN__RK_argmin_USES_M 0
#define TN__RK_all_USES_M 0
#define TN__RK_any_USES_M 0
#define TN__RK_lse1_USES_M 0
#define TN__RK_lse2_USES_M 1

#define TN__RFOLD_OP(E, OP, ID, II, SF, SI, CF, CI) \
    TN__RFOLD_T(OP, b8,  uint8_t,  0, (double)x, (int64_t)x, tn__rexp_d, SF, SI) \
    TN__RFOLD_T(OP, i32, int32_t,  0, (double)x, (int64_t)x, tn__rexp_d, SF, SI) \
    TN__RFOLD_T(OP, i64, int64_t,  0, (double)x, (int64_t)x, tn__rexp_d, SF, SI) \
    TN__RFOLD_T(OP, f16, uint16_t, 1, (double)tn_f16_to_f32(x), 0, tn__rexp_f, SF, SI) \
    TN__RFOLD_T(OP, f32, float,    1, (double)x, 0, tn__rexp_f, SF, SI) \
    TN__RFOLD_T(OP, f64, double,   1, (double)x, 0, tn__rexp_d, SF, SI)

TN__RFOLDS(TN__RFOLD_OP)

#define TN__RTAB_ROW1(E, OP, ...) { NULL, tn__rf1_##OP##_b8, tn__rf1_##OP##_i32, tn__rf1_##OP##_i64, tn__rf1_##OP##_f16, tn__rf1_##OP##_f32, tn__rf1_##OP##_f64 },
#define TN__RTAB_ROWL(E, OP, ...) { NULL, tn__rfl_##OP##_b8, tn__rfl_##OP##_i32, tn__rfl_##OP##_i64, tn__rfl_##OP##_f16, tn__rfl_##OP##_f32, tn__rfl_##OP##_f64 },
static const tn__rfold1_fn tn__rfold1[TN__RK_COUNT][TN_DTYPE_COUNT] = { TN__RFOLDS(TN__RTAB_ROW1) };
static const tn__rfoldl_fn tn__rfoldl[TN__RK_COUNT][TN_DTYPE_COUNT] = { TN__RFOLDS(TN__RTAB_ROWL) };
TN__STATIC_ASSERT(TN_DTYPE_COUNT == 7, "reduction fold tables list one column per dtype");

/* Folds in double: floats, and ints where the fold converts them. */
static bool tn__rk_float(int rk, tn_dtype t) {
    return tn_dtype_is_float(t) || rk == TN__RK_MEAN || rk == TN__RK_LSE1 || rk == TN__RK_LSE2;
}

static void tn__racc_init(tn__racc *a, int rk) {
    a->m = 0; a->g = 0;
    switch (rk) {
#define TN__RINIT_CASE(E, n, ID, II, ...) case TN__RK_##E: a->d = ID; a->i = II; break;
    TN__RFOLDS(TN__RINIT_CASE)
#undef TN__RINIT_CASE
    default: a->d = 0; a->i = 0; break;
    }
}

/* Combines partial b (a later part of the box) into a. */
static void tn__racc_combine(tn__racc *a, const tn__racc *b, int rk, bool fl) {
    double D = a->d;
    int64_t I = a->i, G = a->g;
    const double BD = b->d;
    const int64_t BI = b->i, BG = b->g;
    (void)BD; (void)BI; (void)BG;
    switch (rk) {
#define TN__RCOMB_CASE(E, n, ID, II, SF, SI, CF, CI) case TN__RK_##E: if (fl) { CF; } else { CI; } break;
    TN__RFOLDS(TN__RCOMB_CASE)
#undef TN__RCOMB_CASE
    default: break;
    }
    a->d = D; a->i = I; a->g = G;
}

/* >>reduce_store: one output element from its accumulator */
static void tn__rstore(char *y, tn_dtype t, double d, int64_t i, bool use_int) {
    switch (t) {
    case TN_BOOL: *(uint8_t *)y = (uint8_t)(use_int ? i != 0 : d != 0); break;
    case TN_I32: *(int32_t *)(void *)y = (int32_t)i; break;
    case TN_I64: *(int64_t *)(void *)y = i; break;
    case TN_F16: *(uint16_t *)(void *)y = tn_f32_to_f16((float)(use_int ? (double)i : d)); break;
    case TN_F32: *(float *)(void *)y = (float)(use_int ? (double)i : d); break;
    case TN_F64: *(double *)(void *)y = use_int ? (double)i : d; break;
    default: break;
    }
}

/* >>reduce_plan */
#define TN__RED_MAX_SRC 16     /* prologue and epilogue inputs the kernel accepts */
#define TN__RED_SCRATCH 1024   /* prologue elements evaluated per block */

typedef struct tn__rplan {
    int op, rk;                 /* TN_OP_*, TN__RK_* (pass 1 for logsumexp) */
    tn_dtype xt, yt;            /* dtype of the reduction's input, of its output */
    bool fl;                    /* accumulate in double */
    int nsrc;                   /* the sources folded: 1, or the prologue's inputs */
    int nepi;                   /* the epilogue's sources after them (strides nsrc..; 0 along the box) */
    const tn_ew_program *prog;  /* NULL: no prologue (an identity one included) */
    const tn_ew_program *epi;   /* NULL: no epilogue */
    tn_array *const *in;
    const char *x[TN__RED_MAX_SRC];
    char *y;
    int nk, nr;                 /* kept and reduced dims after merging */
    int64_t kn[TN_MAX_DIMS], ky[TN_MAX_DIMS], kx[TN__RED_MAX_SRC][TN_MAX_DIMS];
    int64_t rn[TN_MAX_DIMS], rx[TN__RED_MAX_SRC][TN_MAX_DIMS];
    int64_t M, N;               /* output elements, reduced elements */
    int64_t split_lo[65];       /* split loop: part boundaries on reduced dim 0 */
    tn__racc part[64];          /* split loop: partial results */
    int split_rk;               /* split loop: the pass being run */
    double split_m;             /* split loop: logsumexp's max in pass 2 */
} tn__rplan;

/* Broadcast strides of a (right-aligned) against a shape of ndim dims. */
static void tn__rbcast_strides(const tn_array *a, int ndim, const int64_t *shape, int64_t *st) {
    int off = ndim - a->ndim;
    for (int d = 0; d < ndim; d++) {
        int ad = d - off;
        st[d] = (ad < 0 || (a->shape[ad] == 1 && shape[d] != 1)) ? 0 : a->strides[ad];
    }
}

/* A reduction's prologue that passes its one input through unchanged: the
   form a reduction with an epilogue and no prologue takes. */
static bool tn__ew_program_is_identity(const tn_ew_program *p) {
    return p && p->n_in == 1 && p->n_instr == 0 && p->n_out == 1 && p->out_reg[0] == 0 && p->out_dtype[0] == p->in_dtype[0];
}

/* Builds the plan: logical input shape, per-source strides, kept/reduced
   dims. y is the array the reduction stores (the epilogue's input 0 when
   there is one: the output's shape). The epilogue's sources may widen a kept
   dim of 1 (the box is then folded again for each element); anything else
   that disagrees is an error (the type rule checked the node). */
static tn_result tn__rplan_build(tn__rplan *P, const tn_var *node, tn_array *const *in,
                                 const tn_array *y, uint64_t mask, bool keepdims) {
    int ndim = 0;
    int64_t shape[TN_MAX_DIMS], st[TN__RED_MAX_SRC][TN_MAX_DIMS];
    const tn_ew_program *ext = (const tn_ew_program *)node->ext;
    const char *name = tn__op_def(node->op)->name;
    P->prog = ext && !tn__ew_program_is_identity(ext) ? ext : NULL;
    P->epi = ext ? ext->epi : NULL;
    P->in = in;
    P->yt = y->dtype;
    P->y = (char *)y->data;
    P->nsrc = ext ? ext->n_in : 1;
    P->nepi = P->epi ? P->epi->n_in - 1 : 0;
    if (P->nsrc + P->nepi > TN__RED_MAX_SRC || (ext && ext->n_out < 1) || P->nepi < 0)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: a fused prologue of %d inputs and an epilogue of %d (the kernel takes up to %d inputs)",
                       name, P->nsrc, P->nepi, TN__RED_MAX_SRC);
    P->xt = P->prog ? P->prog->out_dtype[0] : in[0]->dtype;
    for (int s = 0; s < P->nsrc; s++) if (in[s]->ndim > ndim) ndim = in[s]->ndim;
    for (int d = 0; d < ndim; d++) {          /* the folded sources' broadcast */
        shape[d] = 1;
        for (int s = 0; s < P->nsrc; s++) {
            int ad = d - (ndim - in[s]->ndim);
            if (ad >= 0 && in[s]->shape[ad] != 1) shape[d] = in[s]->shape[ad];
        }
    }
    /* the epilogue's sources, right-aligned to y's dims: y's dim od is input dim d */
    for (int e = 0, ns = P->nsrc; e < P->nepi; e++) {
        const tn_array *a = in[ns + e];
        for (int d = 0, od = 0; d < ndim; d++) {
            bool red = (mask >> d) & 1;
            st[ns + e][d] = 0;
            if (red && !keepdims) continue;
            int ad = od++ - (y->ndim - a->ndim);
            int64_t n = ad >= 0 ? a->shape[ad] : 1;
            if (n == 1) continue;
            if (shape[d] == 1 && !red) shape[d] = n;
            else if (red || shape[d] != n) {
                char sa[128], sx[128];
                return tn__err(TN_ERR_SHAPE, "%s: epilogue input %d of shape %s does not broadcast into the result of an input of shape %s",
                               name, e + 1, tn__shape_str(a->ndim, a->shape, sa), tn__shape_str(ndim, shape, sx));
            }
            st[ns + e][d] = a->strides[ad];
        }
        P->x[ns + e] = (const char *)a->data;
    }
    for (int s = 0; s < P->nsrc; s++) {
        tn__rbcast_strides(in[s], ndim, shape, st[s]);
        P->x[s] = (const char *)in[s]->data;
    }
    const int nall = P->nsrc + P->nepi;
    P->nk = P->nr = 0;
    P->M = P->N = 1;
    int od = 0;
    for (int d = 0; d < ndim; d++) {
        bool red = (mask >> d) & 1;
        if (red) P->N *= shape[d]; else P->M *= shape[d];
        int64_t ys = 0;
        if (!red || keepdims) { ys = y->strides[od]; od++; }
        if (shape[d] == 1) continue;
        if (red) {
            int r = P->nr++;
            P->rn[r] = shape[d];
            for (int s = 0; s < nall; s++) P->rx[s][r] = st[s][d];
        } else {
            int k = P->nk++;
            P->kn[k] = shape[d]; P->ky[k] = ys;
            for (int s = 0; s < nall; s++) P->kx[s][k] = st[s][d];
        }
    }
    TN_ASSERT(od == y->ndim);
    /* Merge chained dims within each group; a kept dim's output stride chains too. */
    P->nr = tn__merge_dims(P->nr, P->rn, nall, P->rx);
    int64_t kst[TN__RED_MAX_SRC + 1][TN_MAX_DIMS];
    for (int s = 0; s < nall; s++) memcpy(kst[s], P->kx[s], sizeof(int64_t) * (size_t)P->nk);
    memcpy(kst[nall], P->ky, sizeof(int64_t) * (size_t)P->nk);
    P->nk = tn__merge_dims(P->nk, P->kn, nall + 1, kst);
    for (int s = 0; s < nall; s++) memcpy(P->kx[s], kst[s], sizeof(int64_t) * (size_t)P->nk);
    memcpy(P->ky, kst[nall], sizeof(int64_t) * (size_t)P->nk);
    if (P->nr == 0) {   /* nothing left to reduce: one run of one element */
        P->nr = 1; P->rn[0] = 1;
        for (int s = 0; s < nall; s++) P->rx[s][0] = 0;
    }
    P->fl = tn__rk_float(P->rk, P->xt);
    return TN_OK;
}

/* Offsets of output element o: per source into the input, and into y. */
static void tn__rplan_outer(const tn__rplan *P, int64_t o, int64_t *xoff, int64_t *yoff) {
    for (int s = 0; s < P->nsrc; s++) xoff[s] = 0;
    *yoff = 0;
    for (int k = P->nk - 1; k >= 0; k--) {
        int64_t i = o % P->kn[k];
        o /= P->kn[k];
        *yoff += i * P->ky[k];
        for (int s = 0; s < P->nsrc; s++) xoff[s] += i * P->kx[s][k];
    }
}

/* One run of the prologue, n elements from offsets xoff along reduced dim
   rd, evaluated in blocks into scratch and folded. */
static tn_result tn__rprologue_run(const tn__rplan *P, tn__rfold1_fn f, tn__racc *a,
                                   const int64_t *xoff, int rd, int64_t n, int64_t k0) {
    double scratch[TN__RED_SCRATCH];
    tn_array views[TN__RED_MAX_SRC], outv;
    tn_array *vp[TN__RED_MAX_SRC], *op = &outv;
    size_t es = tn_dtype_size(P->xt);
    for (int64_t j = 0; j < n; j += TN__RED_SCRATCH) {
        int64_t m = n - j < TN__RED_SCRATCH ? n - j : TN__RED_SCRATCH;
        for (int s = 0; s < P->nsrc; s++) {
            memset(&views[s], 0, sizeof views[s]);
            views[s].dtype = P->in[s]->dtype;
            views[s].ndim = 1;
            views[s].shape[0] = m;
            views[s].strides[0] = P->rx[s][rd];
            views[s].data = (void *)(P->x[s] + xoff[s] + j * P->rx[s][rd]);
            views[s].device = TN_HOST;
            vp[s] = &views[s];
        }
        memset(&outv, 0, sizeof outv);
        outv.dtype = P->xt; outv.ndim = 1; outv.shape[0] = m;
        outv.strides[0] = (int64_t)es; outv.data = scratch; outv.device = TN_HOST;
        tn_result r = tn__cpu_ew_run(P->prog, vp, &op);
        if (r != TN_OK) return r;
        f(a, (const char *)scratch, m, (int64_t)es, k0 + j);
    }
    return TN_OK;
}

/* Folds the box at xoff (reduced dim 0 restricted to [lo, hi)) into a. */
static tn_result tn__rbox(const tn__rplan *P, int rk, tn__racc *a, const int64_t *xoff0, int64_t lo, int64_t hi) {
    tn__rfold1_fn f = tn__rfold1[rk][P->xt];
    int nr = P->nr, last = nr - 1;
    if (P->N == 0) return TN_OK;
    int64_t idx[TN_MAX_DIMS] = {0}, inner[TN_MAX_DIMS];
    inner[last] = 1;
    for (int d = last - 1; d >= 0; d--) inner[d] = inner[d + 1] * P->rn[d + 1];
    if (nr == 1) {   /* the box is one run */
        int64_t xoff[TN__RED_MAX_SRC];
        for (int s = 0; s < P->nsrc; s++) xoff[s] = xoff0[s] + lo * P->rx[s][0];
        if (P->prog) return tn__rprologue_run(P, f, a, xoff, 0, hi - lo, lo);
        f(a, P->x[0] + xoff[0], hi - lo, P->rx[0][0], lo);
        return TN_OK;
    }
    idx[0] = lo;
    if (lo >= hi) return TN_OK;
    for (;;) {
        int64_t xoff[TN__RED_MAX_SRC], k0 = 0;
        for (int d = 0; d < last; d++) k0 += idx[d] * inner[d];
        for (int s = 0; s < P->nsrc; s++) {
            xoff[s] = xoff0[s];
            for (int d = 0; d < last; d++) xoff[s] += idx[d] * P->rx[s][d];
        }
        if (P->prog) {
            tn_result r = tn__rprologue_run(P, f, a, xoff, last, P->rn[last], k0);
            if (r != TN_OK) return r;
        } else {
            f(a, P->x[0] + xoff[0], P->rn[last], P->rx[0][last], k0);
        }
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < (d == 0 ? hi : P->rn[d])) break;
            idx[d] = 0;
        }
        if (d < 0) return TN_OK;
    }
}

/* Writes the final value of accumulator a at y. */
static void tn__rfinish(const tn__rplan *P, const tn__racc *a, char *y) {
    switch (P->op) {
    case TN_OP_MEAN: tn__rstore(y, P->yt, a->d / (double)P->N, 0, false); break;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: tn__rstore(y, P->yt, 0, a->g, true); break;
    case TN_OP_ALL: case TN_OP_ANY: tn__rstore(y, P->yt, 0, a->i, true); break;
    case TN_OP_LOGSUMEXP: tn__rstore(y, P->yt, isfinite(a->m) ? a->m + log(a->d) : a->m, 0, false); break;
    default: tn__rstore(y, P->yt, a->d, a->i, !P->fl); break;
    }
}

/* Between logsumexp's passes: m takes the max, the sum restarts. A
   non-finite max is the answer (see the top of the file): no second pass. */
static void tn__rlse_mid(tn__racc *a) {
    a->m = a->d;
    a->d = 0;
}

/* The whole box of one output element, both passes for logsumexp. */
static tn_result tn__rbox_full(const tn__rplan *P, tn__racc *a, const int64_t *xoff, int64_t lo, int64_t hi) {
    tn__racc_init(a, P->rk);
    tn_result r = tn__rbox(P, P->rk, a, xoff, lo, hi);
    if (r != TN_OK || P->op != TN_OP_LOGSUMEXP) return r;
    tn__rlse_mid(a);
    if (!isfinite(a->m)) return TN_OK;
    return tn__rbox(P, TN__RK_LSE2, a, xoff, lo, hi);
}

typedef struct tn__rjob { tn__rplan *P; tn_result r; } tn__rjob;

static void tn__rbox_range(void *ctx, int64_t lo, int64_t hi) {
    tn__rjob *J = (tn__rjob *)ctx;
    const tn__rplan *P = J->P;
    for (int64_t o = lo; o < hi; o++) {
        int64_t xoff[TN__RED_MAX_SRC], yoff;
        tn__racc a;
        tn__rplan_outer(P, o, xoff, &yoff);
        tn_result r = tn__rbox_full(P, &a, xoff, 0, P->rn[0]);
        if (r != TN_OK) { J->r = r; return; }
        tn__rfinish(P, &a, P->y + yoff);
    }
}

/* Lanes loop: units are (outer output index, block of the innermost kept dim). */
static void tn__rlanes_pass(const tn__rplan *P, int rk, tn__rlanes *acc, int64_t nl, const char *x0) {
    tn__rfoldl_fn f = tn__rfoldl[rk][P->xt];
    int nr = P->nr;
    int64_t idx[TN_MAX_DIMS] = {0}, ls = P->kx[0][P->nk - 1];
    for (int64_t k = 0;; k++) {
        int64_t off = 0;
        for (int d = 0; d < nr; d++) off += idx[d] * P->rx[0][d];
        f(acc, x0 + off, nl, ls, k);
        int d = nr - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < P->rn[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

static void tn__rlanes_range(void *ctx, int64_t lo, int64_t hi) {
    tn__rjob *J = (tn__rjob *)ctx;
    const tn__rplan *P = J->P;
    tn__rlanes acc;
    tn__racc a;
    int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
    for (int64_t u = lo; u < hi; u++) {
        int64_t outer = u / nb, b = u % nb, j0 = b * TN__RED_LANES;
        int64_t nl = n0 - j0 < TN__RED_LANES ? n0 - j0 : TN__RED_LANES;
        int64_t xoff[1], yoff;
        tn__rplan_outer(P, outer * n0 + j0, xoff, &yoff);
        const char *x0 = P->x[0] + xoff[0];
        tn__racc_init(&a, P->rk);
        for (int64_t j = 0; j < nl; j++) { acc.d[j] = a.d; acc.m[j] = a.m; acc.i[j] = a.i; acc.g[j] = a.g; }
        tn__rlanes_pass(P, P->rk, &acc, nl, x0);
        if (P->op == TN_OP_LOGSUMEXP) {
            /* lanes with a non-finite max are done (their sum runs with 0
               and is ignored); the others sum exp(x - max) */
            double keep[TN__RED_LANES];
            for (int64_t j = 0; j < nl; j++) {
                keep[j] = acc.d[j];
                acc.m[j] = isfinite(acc.d[j]) ? acc.d[j] : 0;
                acc.d[j] = 0;
            }
            tn__rlanes_pass(P, TN__RK_LSE2, &acc, nl, x0);
            for (int64_t j = 0; j < nl; j++) acc.m[j] = keep[j];
        }
        int64_t ys = P->ky[P->nk - 1];
        for (int64_t j = 0; j < nl; j++) {
            a.d = acc.d[j]; a.m = acc.m[j]; a.i = acc.i[j]; a.g = acc.g[j];
            tn__rfinish(P, &a, P->y + yoff + j * ys);
        }
    }
}

/* Split loop (one output): part p folds reduced dim 0 over [split_lo[p], split_lo[p+1]). */
static void tn__rsplit_range(void *ctx, int64_t lo, int64_t hi) {
    tn__rjob *J = (tn__rjob *)ctx;
    tn__rplan *P = J->P;
    int64_t xoff[TN__RED_MAX_SRC] = {0};
    for (int64_t p = lo; p < hi; p++) {
        tn__racc_init(&P->part[p], P->split_rk);
        P->part[p].m = P->split_m;
        tn_result r = tn__rbox(P, P->split_rk, &P->part[p], xoff, P->split_lo[p], P->split_lo[p + 1]);
        if (r != TN_OK) J->r = r;
    }
}

static tn_result tn__rsplit_pass(tn__rplan *P, int rk, int nparts, tn__racc *a) {
    tn__rjob J = { P, TN_OK };
    P->split_rk = rk;
    tn__parallel_for(nparts, 1, tn__rsplit_range, &J);
    if (J.r != TN_OK) return J.r;
    *a = P->part[0];
    for (int p = 1; p < nparts; p++) tn__racc_combine(a, &P->part[p], rk, P->fl);
    return TN_OK;
}

static tn_result tn__rsplit(tn__rplan *P, int nparts) {
    tn__racc a;
    for (int p = 0; p <= nparts; p++) P->split_lo[p] = P->rn[0] * p / nparts;
    P->split_m = 0;
    tn_result r = tn__rsplit_pass(P, P->rk, nparts, &a);
    if (r != TN_OK) return r;
    if (P->op == TN_OP_LOGSUMEXP) {
        tn__rlse_mid(&a);
        if (isfinite(a.m)) {
            double m = a.m;
            P->split_m = m;
            r = tn__rsplit_pass(P, TN__RK_LSE2, nparts, &a);
            if (r != TN_OK) return r;
            a.m = m;
        }
    }
    tn__rfinish(P, &a, P->y);
    return TN_OK;
}

#define TN__RED_GRAIN 32768    /* input elements per thread before splitting pays */

static int tn__rk_of(int op) {
    switch (op) {
    case TN_OP_SUM: return TN__RK_SUM;
    case TN_OP_PROD: return TN__RK_PROD;
    case TN_OP_MEAN: return TN__RK_MEAN;
    case TN_OP_MAX: return TN__RK_MAX;
    case TN_OP_MIN: return TN__RK_MIN;
    case TN_OP_ARGMAX: return TN__RK_ARGMAX;
    case TN_OP_ARGMIN: return TN__RK_ARGMIN;
    case TN_OP_ALL: return TN__RK_ALL;
    case TN_OP_ANY: return TN__RK_ANY;
    default: return TN__RK_LSE1;
    }
}

static bool tn__rop_needs_nonempty(int op) {
    return op == TN_OP_MAX || op == TN_OP_MIN || op == TN_OP_ARGMAX || op == TN_OP_ARGMIN;
}

static void tn__reduce_label(const tn_var *node, char *buf, size_t cap);

static tn_result tn__reduce_fold(const tn_var *node, tn_array *const *in, const tn_array *y);

/* With an epilogue, the results are stored in y's buffer as the reduction's
   dtype when its elements are as wide (the epilogue then reads and writes
   each element in place, as an elementwise op in place does), else in a
   scratch block (on the stack up to 4 KB); then the epilogue runs over them. */
static tn_result tn__reduce_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_ew_program *ext = (const tn_ew_program *)node->ext, *epi = ext ? ext->epi : NULL;
    if (!epi) return tn__reduce_fold(node, in, out[0]);
    tn_array *y = out[0], r = *y;
    tn_dtype rt = epi->in_dtype[0];
    size_t es = tn_dtype_size(rt);
    int64_t n = tn_array_size(y);
    r.dtype = rt;
    r.base = NULL;
    double small[512];              /* a few results of another width: no allocation */
    bool apart = es != tn_dtype_size(y->dtype) || !tn_array_is_contiguous(y), own = apart && (size_t)n * es > sizeof small;
    if (apart) r.data = small;
    if (own) {
        r.data = tn__malloc((size_t)(n ? n : 1) * es);
        if (!r.data) return tn__err(TN_ERR_OOM, "%s: out of memory for %lld results before the epilogue", tn__op_def(node->op)->name, (long long)n);
    }
    int64_t step = (int64_t)es;
    for (int d = r.ndim - 1; d >= 0; d--) { r.strides[d] = step; step *= r.shape[d] > 1 ? r.shape[d] : 1; }
    tn_result res = tn__reduce_fold(node, in, &r);
    if (res == TN_OK && n > 0) {
        tn_array *ein[TN__RED_MAX_SRC + 1];
        int ne = epi->n_in - 1;
        ein[0] = &r;
        for (int e = 0; e < ne; e++) ein[1 + e] = in[ext->n_in + e];
        res = tn__cpu_ew_run(epi, ein, out);
    }
    if (own) tn__free(r.data);
    return res;
}

/* The reduction itself, stored at y (the output, or the epilogue's input 0). */
static tn_result tn__reduce_fold(const tn_var *node, tn_array *const *in, const tn_array *y) {
    tn__rplan *P, plan;
    P = &plan;
    P->op = node->op;
    P->rk = tn__rk_of(node->op);
    uint64_t mask = tn__p_red_mask(&node->p);
    tn_result r = tn__rplan_build(P, node, in, y, mask, tn__p_red_keepdims(&node->p));
    if (r != TN_OK) return r;
    if (P->M == 0) return TN_OK;
    if (P->N == 0 && tn__rop_needs_nonempty(node->op)) {
        char lab[96], sb[128];
        tn__reduce_label(node, lab, sizeof lab);
        const tn_array *x = in[0];
        return tn__err(TN_ERR_SHAPE, "%s: zero-size reduction of an input of shape %s: %s has no identity",
                       lab, tn__shape_str(x->ndim, x->shape, sb), tn__op_def(node->op)->name);
    }
    tn__rjob J = { P, TN_OK };
    int nt = tn__num_threads();
    int64_t total = P->M * (P->N ? P->N : 1);
    bool lanes = !P->prog && P->nk > 0 && P->N > 1;
    if (lanes) {
        int64_t ls = P->kx[0][P->nk - 1];
        ls = ls < 0 ? -ls : ls;
        for (int d = 0; d < P->nr; d++) {
            int64_t rs = P->rx[0][d] < 0 ? -P->rx[0][d] : P->rx[0][d];
            if (rs <= ls) lanes = false;
        }
    }
    if (lanes) {
        int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
        int64_t units = P->M / n0 * nb, per = P->N * (n0 < TN__RED_LANES ? n0 : TN__RED_LANES);
        tn__parallel_for(units, TN__RED_GRAIN / per + 1, tn__rlanes_range, &J);
    } else if (P->M == 1 && nt > 1 && total >= 2 * TN__RED_GRAIN && P->rn[0] >= 2) {
        int64_t parts = total / TN__RED_GRAIN;
        if (parts > nt * 4) parts = nt * 4;
        if (parts > 63) parts = 63;
        if (parts > P->rn[0]) parts = P->rn[0];
        return tn__rsplit(P, (int)parts);
    } else {
        tn__parallel_for(P->M, TN__RED_GRAIN / (P->N ? P->N : 1) + 1, tn__rbox_range, &J);
    }
    return J.r;
}

/* >>softmax: rows along the axis, three passes (max, sum of exp, write). */
typedef struct tn__smplan {
    tn__rplan r;                /* kept dims and the axis run, as a reduction */
    bool logsm;
    int64_t ys;                 /* output stride along the axis */
} tn__smplan;

/* SE: the output holds exp(x - m) exactly enough to be scaled in place
   (float32, float64): one exp per element; float16 output recomputes it. */
#define TN__SMAX_T(SUF, T, LF, OT, STORE, LOADY, SE, EXPF) \
static void tn__smrow_##SUF(const char *xp, int64_t n, int64_t xs, char *yp, int64_t ys, bool logsm) { \
    double m = -INFINITY, s = 0; \
    for (int64_t j = 0; j < n; j++) { T x = *(const T *)(const void *)(xp + j * xs); double v = (LF); if (v > m || v != v) m = v; } \
    for (int64_t j = 0; j < n; j++) { \
        T x = *(const T *)(const void *)(xp + j * xs); double e = EXPF((LF) - m); s += e; \
        if (SE && !logsm) { double r = e; OT *q = (OT *)(void *)(yp + j * ys); STORE; } \
    } \
    double ls = log(s), inv = 1.0 / s; \
    for (int64_t j = 0; j < n; j++) { \
        T x = *(const T *)(const void *)(xp + j * xs); \
        OT *q = (OT *)(void *)(yp + j * ys); \
        double r = logsm ? (LF) - m - ls : SE ? (double)(LOADY) * inv : EXPF((LF) - m) * inv; \
        (void)x; STORE; \
    } \
} \
static void tn__smlanes_##SUF(const char *xp, int64_t n, int64_t xs, int64_t nl, int64_t ls_, \
                              char *yp, int64_t ys, int64_t yls, bool logsm) { \
    double m[TN__RED_LANES], s[TN__RED_LANES]; \
    for (int64_t l = 0; l < nl; l++) { m[l] = -INFINITY; s[l] = 0; } \
    for (int64_t j = 0; j < n; j++) for (int64_t l = 0; l < nl; l++) { \
        T x = *(const T *)(const void *)(xp + j * xs + l * ls_); double v = (LF); \
        if (v > m[l] || v != v) m[l] = v; } \
    for (int64_t j = 0; j < n; j++) for (int64_t l = 0; l < nl; l++) { \
        T x = *(const T *)(const void *)(xp + j * xs + l * ls_); double e = EXPF((LF) - m[l]); s[l] += e; \
        if (SE && !logsm) { double r = e; OT *q = (OT *)(void *)(yp + j * ys + l * yls); STORE; } } \
    for (int64_t l = 0; l < nl; l++) s[l] = logsm ? log(s[l]) : 1.0 / s[l]; \
    for (int64_t j = 0; j < n; j++) for (int64_t l = 0; l < nl; l++) { \
        T x = *(const T *)(const void *)(xp + j * xs + l * ls_); \
        OT *q = (OT *)(void *)(yp + j * ys + l * yls); \
        double r = logsm ? (LF) - m[l] - s[l] : SE ? (double)(LOADY) * s[l] : EXPF((LF) - m[l]) * s[l]; \
        (void)x; STORE; \
    } \
}
TN__SMAX_T(b8,  uint8_t,  (double)x, double, *q = r, *q, 1, tn__rexp_d)
TN__SMAX_T(i32, int32_t,  (double)x, double, *q = r, *q, 1, tn__rexp_d)
TN__SMAX_T(i64, int64_t,  (double)x, double, *q = r, *q, 1, tn__rexp_d)
TN__SMAX_T(f16, uint16_t, (double)tn_f16_to_f32(x), uint16_t, *q = tn_f32_to_f16((float)r), 0, 0, tn__rexp_f)
TN__SMAX_T(f32, float,    (double)x, float, *q = (float)r, *q, 1, tn__rexp_f)
TN__SMAX_T(f64, double,   (double)x, double, *q = r, *q, 1, tn__rexp_d)

typedef void (*tn__smrow_fn)(const char *, int64_t, int64_t, char *, int64_t, bool);
typedef void (*tn__smlanes_fn)(const char *, int64_t, int64_t, int64_t, int64_t, char *, int64_t, int64_t, bool);
static const tn__smrow_fn tn__smrow[TN_DTYPE_COUNT] = { NULL, tn__smrow_b8, tn__smrow_i32, tn__smrow_i64, tn__smrow_f16, tn__smrow_f32, tn__smrow_f64 };
static const tn__smlanes_fn tn__smlanes[TN_DTYPE_COUNT] = { NULL, tn__smlanes_b8, tn__smlanes_i32, tn__smlanes_i64, tn__smlanes_f16, tn__smlanes_f32, tn__smlanes_f64 };

static void tn__smrow_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__smplan *S = (const tn__smplan *)ctx;
    const tn__rplan *P = &S->r;
    for (int64_t o = lo; o < hi; o++) {
        int64_t xoff[1], yoff;
        tn__rplan_outer(P, o, xoff, &yoff);
        tn__smrow[P->xt](P->x[0] + xoff[0], P->rn[0], P->rx[0][0], P->y + yoff, S->ys, S->logsm);
    }
}

static void tn__smlanes_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__smplan *S = (const tn__smplan *)ctx;
    const tn__rplan *P = &S->r;
    int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
    for (int64_t u = lo; u < hi; u++) {
        int64_t outer = u / nb, j0 = (u % nb) * TN__RED_LANES;
        int64_t nl = n0 - j0 < TN__RED_LANES ? n0 - j0 : TN__RED_LANES;
        int64_t xoff[1], yoff;
        tn__rplan_outer(P, outer * n0 + j0, xoff, &yoff);
        tn__smlanes[P->xt](P->x[0] + xoff[0], P->rn[0], P->rx[0][0], nl, P->kx[0][P->nk - 1],
                           P->y + yoff, S->ys, P->ky[P->nk - 1], S->logsm);
    }
}

static tn_result tn__softmax_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__smplan S;
    int axis = tn__p_axis(&node->p);
    if (node->ext)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: a fused prologue is not supported", tn__op_def(node->op)->name);
    S.r.op = node->op;
    S.r.rk = TN__RK_MAX;
    tn_result r = tn__rplan_build(&S.r, node, in, out[0], (uint64_t)1 << axis, true);
    if (r != TN_OK) return r;
    S.logsm = node->op == TN_OP_LOG_SOFTMAX;
    S.ys = out[0]->strides[axis];
    tn__rplan *P = &S.r;
    if (P->M == 0 || P->N == 0) return TN_OK;
    if (P->N == 1) S.ys = 0;   /* the axis was dropped; its one element sits at offset 0 */
    bool lanes = P->nk > 0 && P->N > 1;
    if (lanes) {
        int64_t ls = P->kx[0][P->nk - 1], rs = P->rx[0][0];
        lanes = (ls < 0 ? -ls : ls) < (rs < 0 ? -rs : rs);
    }
    if (lanes) {
        int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
        int64_t per = P->N * (n0 < TN__RED_LANES ? n0 : TN__RED_LANES);
        tn__parallel_for(P->M / n0 * nb, TN__RED_GRAIN / per + 1, tn__smlanes_range, &S);
    } else {
        tn__parallel_for(P->M, TN__RED_GRAIN / P->N + 1, tn__smrow_range, &S);
    }
    return TN_OK;
}

/* >>reduce_infer: NumPy's dtype rules */
static tn_dtype tn__reduce_dtype(int op, tn_dtype t) {
    switch (op) {
    case TN_OP_SUM: case TN_OP_PROD: case TN_OP_SIZE: return tn_dtype_is_float(t) ? t : TN_I64;
    case TN_OP_MEAN: case TN_OP_LOGSUMEXP: case TN_OP_SOFTMAX: case TN_OP_LOG_SOFTMAX:
        return tn_dtype_is_float(t) ? t : TN_F64;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: return TN_I64;
    case TN_OP_ALL: case TN_OP_ANY: return TN_BOOL;
    default: return t;   /* max, min */
    }
}

/* The type of the reduction's input: in[0], or the prologue's output 0 over
   the broadcast of the node's inputs. */
static tn_result tn__reduce_src_type(const tn_var *node, const tn_type *in, tn_type *src, const char *lab) {
    const tn_ew_program *prog = (const tn_ew_program *)node->ext;
    if (!prog) {
        if (node->n_in != 1) return tn__err(TN_ERR_INVALID, "%s takes 1 input, got %d", lab, node->n_in);
        *src = in[0];
        return TN_OK;
    }
    int ne = prog->epi ? prog->epi->n_in - 1 : 0;
    if (prog->n_in < 1 || prog->n_in + ne != node->n_in || prog->n_out < 1 || (prog->epi && (ne < 0 || prog->epi->n_out < 1)))
        return tn__err(TN_ERR_INTERNAL, "%s: prologue takes %d inputs and epilogue %d more, node has %d", lab, prog->n_in, ne, node->n_in);
    memset(src, 0, sizeof *src);
    tn_result r = tn__ew_broadcast(node, lab, prog->n_in, in, src);
    src->dtype = prog->out_dtype[0];
    return r;
}

/* The output of a node with an epilogue (a reduction's, a Gemv's): the
   broadcast of its result (*out, the node's own type) with the epilogue's
   other inputs (in[0..ne)), of no more dims, in the epilogue's dtype. */
static tn_result tn__epilogue_type(const tn_var *node, const tn_ew_program *epi, const tn_type *in, tn_type *out, const char *lab) {
    int ne = epi->n_in - 1;
    tn_type t[TN__RED_MAX_SRC + 1];
    if (ne < 0 || ne + 1 > TN__RED_MAX_SRC + 1 || epi->n_out != 1)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: an epilogue of %d inputs and %d outputs", lab, ne + 1, epi->n_out);
    if (epi->in_dtype[0] != out->dtype)
        return tn__err(TN_ERR_INTERNAL, "%s: the epilogue reads %s, the node gives %s", lab, tn_dtype_name(epi->in_dtype[0]),
                       tn_dtype_name(out->dtype));
    t[0] = *out;
    for (int e = 0; e < ne; e++) {
        t[1 + e] = in[e];
        if (t[1 + e].ndim > out->ndim)
            return tn__err(TN_ERR_SHAPE, "%s: epilogue input %d has %d dims, the result %d", lab, e + 1, t[1 + e].ndim, out->ndim);
    }
    tn_type o;
    memset(&o, 0, sizeof o);
    tn_result r = tn__ew_broadcast(node, lab, ne + 1, t, &o);
    if (r != TN_OK) return r;
    o.dtype = epi->out_dtype[0];
    *out = o;
    return TN_OK;
}

/* A reduction's: a reduced axis kept with keepdims must stay 1 (the fusion
   pass makes sure). */
static tn_result tn__reduce_epi_type(const tn_var *node, const tn_type *in, tn_type *out, const char *lab) {
    const tn_ew_program *prog = (const tn_ew_program *)node->ext;
    tn_result r = tn__epilogue_type(node, prog->epi, in + prog->n_in, out, lab);
    if (r != TN_OK) return r;
    if (tn__p_red_keepdims(&node->p)) {
        uint64_t mask = tn__p_red_mask(&node->p);
        for (int d = 0; d < out->ndim; d++)
            if (((mask >> d) & 1) && out->shape[d] != 1)
                return tn__err(TN_ERR_SHAPE, "%s: an epilogue input widens reduced axis %d", lab, d);
    }
    return TN_OK;
}

static tn_result tn__reduce_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    char lab[96], sb[128];
    tn_type x;
    tn__reduce_label(node, lab, sizeof lab);
    tn_result r = tn__reduce_src_type(node, in, &x, lab);
    if (r != TN_OK) return r;
    uint64_t mask = tn__p_red_mask(&node->p);
    bool keep = tn__p_red_keepdims(&node->p);
    if (x.ndim < 64 && (mask >> x.ndim) != 0)
        return tn__err(TN_ERR_AXIS, "%s: axis out of range for an input of ndim %d", lab, x.ndim);
    bool empty_red = false, empty_out = false, unknown = false;
    memset(out, 0, sizeof *out);
    out->dtype = tn__reduce_dtype(node->op, x.dtype);
    for (int d = 0; d < x.ndim; d++) {
        bool red = (mask >> d) & 1;
        if (x.shape[d] < 0) unknown = true;
        if (red) {
            if (x.shape[d] == 0) empty_red = true;
            if (keep) { out->shape[out->ndim] = 1; out->bcast[out->ndim] = true; out->ndim++; }
        } else {
            if (x.shape[d] == 0) empty_out = true;
            out->shape[out->ndim] = x.shape[d];
            out->bcast[out->ndim] = x.bcast[d];
            out->ndim++;
        }
    }
    if (empty_red && !empty_out && !unknown && tn__rop_needs_nonempty(node->op))
        return tn__err(TN_ERR_SHAPE, "%s: zero-size reduction of an input of shape %s: %s has no identity",
                       lab, tn__shape_str(x.ndim, x.shape, sb), tn__op_def(node->op)->name);
    if (node->ext && ((const tn_ew_program *)node->ext)->epi) return tn__reduce_epi_type(node, in, out, lab);
    return TN_OK;
}

static tn_result tn__softmax_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    char lab[96];
    tn__reduce_label(node, lab, sizeof lab);
    if (node->ext) return tn__err(TN_ERR_UNSUPPORTED, "%s: a fused prologue is not supported", lab);
    int axis = tn__p_axis(&node->p);
    if (axis < 0 || axis >= in[0].ndim)
        return tn__err(TN_ERR_AXIS, "%s: axis %d out of range for an input of ndim %d", lab, axis, in[0].ndim);
    *out = in[0];
    out->dtype = tn__reduce_dtype(node->op, in[0].dtype);
    return TN_OK;
}

/* >>reduce_label: Sum{axis=[0,2]}, Softmax{axis=1} */
static void tn__reduce_label(const tn_var *node, char *buf, size_t cap) {
    const tn_op_def *d = tn__op_def(node->op);
    const char *name = d && d->name ? d->name : "Reduce";
    if (node->op == TN_OP_SOFTMAX || node->op == TN_OP_LOG_SOFTMAX) {
        snprintf(buf, cap, "%s{axis=%d}", name, tn__p_axis(&node->p));
        return;
    }
    tn__sbuf b = { buf, cap, 0 };
    tn__sbuf_put(&b, "%s{axis=[", name);
    uint64_t mask = tn__p_red_mask(&node->p);
    bool first = true;
    for (int d = 0; d < 64; d++) {
        if (!((mask >> d) & 1)) continue;
        tn__sbuf_put(&b, first ? "%d" : ",%d", d);
        first = false;
    }
    const tn_ew_program *ext = (const tn_ew_program *)node->ext;
    tn__sbuf_put(&b, "]%s%s", tn__p_red_keepdims(&node->p) ? ",keepdims=True" : "",
                 ext && !(ext->epi && tn__ew_program_is_identity(ext)) ? ",prologue" : "");
    if (ext && ext->epi) { tn__sbuf_put(&b, ",epilogue="); tn__ew_program_label(ext->epi, &b); }
    tn__sbuf_put(&b, "}");
}

/* >>reduce_constructors */
static const char *tn__rvar_name(const tn_var *x) { return x->name ? x->name : "x"; }

/* Axis bit mask from a user's list (NULL: all axes); 0 with the error set on failure. */
static bool tn__reduce_mask(const char *who, tn_var *x, const int *axes, int naxes, uint64_t *mask) {
    int nd = x->type.ndim;
    *mask = 0;
    if (!axes) { *mask = nd ? (((uint64_t)1 << nd) - 1) : 0; return true; }
    if (naxes < 0) { tn__err(TN_ERR_INVALID, "%s: naxes is %d", who, naxes); return false; }
    for (int k = 0; k < naxes; k++) {
        int a = axes[k];
        if (a < -nd || a >= nd) {
            tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for '%s' of ndim %d", who, a, tn__rvar_name(x), nd);
            return false;
        }
        if (a < 0) a += nd;
        if ((*mask >> a) & 1) {
            tn__err(TN_ERR_AXIS, "%s: axis %d is repeated (axes of '%s' of ndim %d)", who, axes[k], tn__rvar_name(x), nd);
            return false;
        }
        *mask |= (uint64_t)1 << a;
    }
    return true;
}

static tn_var *tn__reduce_make(const char *who, int op, tn_var *x, const int *axes, int naxes, bool keepdims) {
    uint64_t mask;
    if (!x) { tn__err_null(who, "x"); return NULL; }
    if (!tn__reduce_mask(who, x, axes, naxes, &mask)) return NULL;
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_red(&p, mask, keepdims);
    return tn__node(x->graph, op, 1, &x, &p, NULL, who);
}

TN_API tn_var *tn_sum(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_sum", TN_OP_SUM, x, axes, naxes, keepdims); }
TN_API tn_var *tn_prod(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_prod", TN_OP_PROD, x, axes, naxes, keepdims); }
TN_API tn_var *tn_mean(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_mean", TN_OP_MEAN, x, axes, naxes, keepdims); }
TN_API tn_var *tn_max(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_max", TN_OP_MAX, x, axes, naxes, keepdims); }
TN_API tn_var *tn_min(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_min", TN_OP_MIN, x, axes, naxes, keepdims); }
TN_API tn_var *tn_all(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_all", TN_OP_ALL, x, axes, naxes, keepdims); }
TN_API tn_var *tn_any(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_any", TN_OP_ANY, x, axes, naxes, keepdims); }
TN_API tn_var *tn_logsumexp(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_logsumexp", TN_OP_LOGSUMEXP, x, axes, naxes, keepdims); }
TN_API tn_var *tn_argmax(tn_var *x, int axis, bool keepdims) { return tn__reduce_make("tn_argmax", TN_OP_ARGMAX, x, &axis, 1, keepdims); }
TN_API tn_var *tn_argmin(tn_var *x, int axis, bool keepdims) { return tn__reduce_make("tn_argmin", TN_OP_ARGMIN, x, &axis, 1, keepdims); }

TN_API tn_var *tn_size(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_size", TN_OP_SIZE, x, axes, naxes, keepdims); }

/* An op of one input and one axis (softmax, log_softmax, cumsum, cumprod):
   the axis checked against x's rank (negative from the end) and stored. */
static tn_var *tn__axis_op_make(const char *who, int op, tn_var *x, int axis) {
    if (!x) { tn__err_null(who, "x"); return NULL; }
    int nd = x->type.ndim;
    if (axis < -nd || axis >= nd) {
        char sb[128];
        tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for '%s' of shape %s", who, axis, tn__rvar_name(x),
                tn__shape_str(nd, x->type.shape, sb));
        return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_axis(&p, axis < 0 ? axis + nd : axis);
    return tn__node(x->graph, op, 1, &x, &p, NULL, who);
}
TN_API tn_var *tn_softmax(tn_var *x, int axis) { return tn__axis_op_make("tn_softmax", TN_OP_SOFTMAX, x, axis); }
TN_API tn_var *tn_log_softmax(tn_var *x, int axis) { return tn__axis_op_make("tn_log_softmax", TN_OP_LOG_SOFTMAX, x, axis); }

/* >>size: SIZE, the count a reduction folds ------------------------------- */
/* Every element of the output is the product of x's reduced dims (1 for
   none), exact in int64 (x's element count fits), stored in the output's
   dtype: a float rounds it once, as the sum of ones does. The type rule and
   label are the reductions'. x is in[0], or with a prologue (node->ext, the
   reductions' form, whose output dtype gives the type) the broadcast of
   every input, a dim of 1 included at run time as NumPy's rule has it (the
   type rule checked that they agree): the optimizer counts an elementwise
   result from its inputs' shapes so (local_size_elemwise). The CUDA back end
   stores the same bytes (its memsets, tensor_cuda.h >>cuda_size): no kernel
   reads x. */
static size_t tn__size_bytes(const tn_var *node, tn_array *const *in, tn_dtype t, unsigned char val[8]) {
    uint64_t mask = tn__p_red_mask(&node->p);
    int64_t n = 1;
    int nd = 0, n_in = node->ext ? node->n_in : 1;
    for (int s = 0; s < n_in; s++) if (in[s]->ndim > nd) nd = in[s]->ndim;
    for (int d = 0; d < nd; d++) {
        if (!((mask >> d) & 1)) continue;
        int64_t m = 1;                 /* the broadcast extent: any input's other than 1 */
        for (int s = 0; s < n_in; s++) {
            int a = d - (nd - in[s]->ndim);
            if (a >= 0 && in[s]->shape[a] != 1) m = in[s]->shape[a];
        }
        n *= m;
    }
    memset(val, 0, 8);
    if (tn_dtype_is_float(t)) tn__store_f(t, val, (double)n);
    else tn__store_i(t, val, n);
    return tn_dtype_size(t);
}

static tn_result tn__size_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_array *o = out[0];
    unsigned char val[8];
    size_t es = tn__size_bytes(node, in, o->dtype, val);
    int64_t total = tn_array_size(o);
    for (int64_t i = 0; i < total; i++) {
        int64_t off = 0, r = i;
        for (int d = o->ndim - 1; d >= 0; d--) { off += (r % o->shape[d]) * o->strides[d]; r /= o->shape[d]; }
        memcpy((char *)o->data + off, val, es);
    }
    return TN_OK;
}

/* >>reduce_grad ----------------------------------------------------------- */

/* The reduced axes (of the input) of a reduction node; returns their count. */
static int tn__red_axes(const tn_var *node, int *axes) {
    int n = 0, nd = node->in[0]->type.ndim;
    uint64_t mask = tn__p_red_mask(&node->p);
    for (int d = 0; d < nd; d++)
        if ((mask >> d) & 1) axes[n++] = d;
    return n;
}

/* v (a reduction's output or its gradient) with the reduced axes put back as
   broadcastable 1s, so it broadcasts against the reduction's input. */
static tn_var *tn__red_keep(tn_var *v, const tn_var *node) {
    if (!v || tn__p_red_keepdims(&node->p)) return v;
    int nd = node->in[0]->type.ndim, pat[TN_MAX_DIMS], k = 0;
    uint64_t mask = tn__p_red_mask(&node->p);
    for (int d = 0; d < nd; d++) pat[d] = ((mask >> d) & 1) ? -1 : k++;
    if (k == nd) return v;
    return tn_dimshuffle(v, nd, pat);
}

/* d prod / d x, elementwise, of x's shape, exact with zeros (one zero: the
   product of the others at the zero, zero elsewhere; two or more: zero). */
static tn_var *tn__red_prod_partial(tn_var *node) {
    tn_var *x = node->in[0];
    int ax[TN_MAX_DIMS], na = tn__red_axes(node, ax);
    tn_var *zero = tn_lit(x, 0.0), *one = tn_lit(x, 1.0);
    tn_var *isz = tn_eq(x, zero);
    tn_var *nz = tn_where(isz, one, x);                    /* zeros replaced by 1 */
    tn_var *p = tn_prod(nz, ax, na, true);                 /* product of the non-zeros */
    tn_var *cnt = tn_sum(tn_cast(isz, x->type.dtype), ax, na, true);
    tn_var *none = tn_div(p, nz);                          /* no zero: prod / x */
    tn_var *one_zero = tn_where(isz, p, zero);             /* one zero: the others' product there */
    return tn_where(tn_eq(cnt, zero), none, tn_where(tn_eq(cnt, one), one_zero, zero));
}

/* max/min: every position equal to the result gets the whole gradient (ties
   are not split, as in Theano); prod: exact with zeros. */
static tn_result tn__reduce_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *x = node->in[0];
    tn_var *gk = tn__red_keep(g, node);
    int ax[TN_MAX_DIMS], na = tn__red_axes(node, ax);
    switch (node->op) {
    case TN_OP_SUM: gin[0] = tn__gbcast_like(gk, x); break;
    case TN_OP_MEAN: {
        double cnt = 1;
        for (int k = 0; k < na; k++) cnt = x->type.shape[ax[k]] < 0 ? -1 : cnt * (double)x->type.shape[ax[k]];
        tn_var *n = cnt >= 0 ? tn_lit(x, cnt) : tn_size(x, ax, na, true);   /* the sum of ones, not computed */
        gin[0] = tn__gbcast_like(tn_div(gk, n), x);
        break;
    }
    case TN_OP_PROD: gin[0] = tn_mul(gk, tn__red_prod_partial(node)); break;
    case TN_OP_MAX: case TN_OP_MIN:
        gin[0] = tn__gmask(tn_eq(x, tn__red_keep(node, node)), gk);   /* where() broadcasts gk */
        break;
    case TN_OP_LOGSUMEXP: gin[0] = tn_mul(gk, tn_exp(tn_sub(x, tn__red_keep(node, node)))); break;
    default: return tn__err(TN_ERR_INTERNAL, "tn_grad: no reduction rule for op %d", node->op);
    }
    return gin[0] ? TN_OK : tn__gfail(tn__op_def(node->op)->name, node);
}

/* Forward mode of the nonlinear reductions (sum and mean are TN_OPF_LINEAR):
   the sum over the box of d out / d x times x's tangent. max/min with ties:
   the mean of the tied tangents (the average of the one-sided derivatives). */
static tn_result tn__reduce_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var *x = node->in[0], *w;   /* d out / d x, elementwise */
    int ax[TN_MAX_DIMS], na = tn__red_axes(node, ax);
    if (!t[0]) return TN_OK;
    if (node->op == TN_OP_PROD) w = tn__red_prod_partial(node);
    else if (node->op == TN_OP_LOGSUMEXP) w = tn_exp(tn_sub(x, tn__red_keep(node, node)));
    else {
        tn_var *m = tn_cast(tn_eq(x, tn__red_keep(node, node)), x->type.dtype);
        w = tn_div(m, tn_sum(m, ax, na, true));
    }
    *out = tn_sum(tn_mul(t[0], w), ax, na, tn__p_red_keepdims(&node->p));
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

static tn_result tn__softmax_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    int axis = tn__p_axis(&node->p);
    if (node->op == TN_OP_SOFTMAX)
        gin[0] = tn_mul(node, tn_sub(g, tn_sum(tn_mul(g, node), &axis, 1, true)));
    else
        gin[0] = tn_sub(g, tn_mul(tn_exp(node), tn_sum(g, &axis, 1, true)));
    return gin[0] ? TN_OK : tn__gfail(tn__op_def(node->op)->name, node);
}

static tn_result tn__softmax_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    int axis = tn__p_axis(&node->p);
    tn_var *tx = t[0];
    if (!tx) return TN_OK;
    if (node->op == TN_OP_SOFTMAX) *out = tn_mul(node, tn_sub(tx, tn_sum(tn_mul(tx, node), &axis, 1, true)));
    else *out = tn_sub(tx, tn_sum(tn_mul(tx, tn_exp(node)), &axis, 1, true));
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

/* >>reduce_rows: this part's rows of the op table (the >>ops_table section) --- */
/* arity -1: a fused prologue brings its own inputs (the type rule checks).
   softmax is no reduction to the fusion pass: it has an axis, not a mask. */
#define TN__REDUCE_ROW(E, NAME, FLAGS, VJP, JVP) \
    { .op = TN_OP_##E, .name = NAME, .kind = TN_OPK_REDUCE, .arity = -1, .infer = tn__reduce_infer, .cpu = tn__reduce_cpu, \
                    .label = tn__reduce_label, .vjp = VJP, .jvp = JVP, .flags = FLAGS },
#define TN__SOFTMAX_ROW(E, NAME) \
    { .op = TN_OP_##E, .name = NAME, .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__softmax_infer, .cpu = tn__softmax_cpu, \
                    .label = tn__reduce_label, .vjp = tn__softmax_vjp, .jvp = tn__softmax_jvp },
#define TN__REDUCE_OP_ROWS \
    TN__REDUCE_ROW(SUM,       "Sum",       TN_OPF_PROLOGUE | TN_OPF_LINEAR, tn__reduce_vjp, NULL) \
    TN__REDUCE_ROW(PROD,      "Prod",      TN_OPF_PROLOGUE, tn__reduce_vjp, tn__reduce_jvp) \
    TN__REDUCE_ROW(MEAN,      "Mean",      TN_OPF_PROLOGUE | TN_OPF_LINEAR, tn__reduce_vjp, NULL) \
    TN__REDUCE_ROW(MAX,       "Max",       TN_OPF_PROLOGUE, tn__reduce_vjp, tn__reduce_jvp) \
    TN__REDUCE_ROW(MIN,       "Min",       TN_OPF_PROLOGUE, tn__reduce_vjp, tn__reduce_jvp) \
    TN__REDUCE_ROW(ARGMAX,    "Argmax",    TN_OPF_DISCRETE, NULL, NULL) \
    TN__REDUCE_ROW(ARGMIN,    "Argmin",    TN_OPF_DISCRETE, NULL, NULL) \
    TN__REDUCE_ROW(ALL,       "All",       TN_OPF_DISCRETE, NULL, NULL) \
    TN__REDUCE_ROW(ANY,       "Any",       TN_OPF_DISCRETE, NULL, NULL) \
    TN__REDUCE_ROW(LOGSUMEXP, "LogSumExp", TN_OPF_PROLOGUE, tn__reduce_vjp, tn__reduce_jvp) \
    TN__SOFTMAX_ROW(SOFTMAX,     "Softmax") \
    TN__SOFTMAX_ROW(LOG_SOFTMAX, "LogSoftmax") \
    { .op = TN_OP_SIZE, .name = "Size", .kind = TN_OPK_SHAPE, .arity = -1, .infer = tn__reduce_infer, .cpu = tn__size_cpu, \
                     .label = tn__reduce_label, .flags = TN_OPF_DISCRETE },

/* >>ops_cumulative ==================================================== */
/* Cumsum and cumprod along one axis, NumPy's cumsum(x, axis)
   and cumprod(x, axis). Param: tn__p_axis (>= 0; the constructors take
   negative axes from the end). Type: x's shape; bool and int inputs give
   int64 (wrapping like NumPy's), floats keep their dtype.

   Kernel: sequential along the axis with one accumulator per line: float32
   in float32 (so results equal NumPy's running sums bit for bit), float16 in
   float32 (rounded to float16 only when stored), float64 in double, ints in
   wrapping int64. Any strides. The lines (one per element of the other dims)
   are split over the thread pool when there are enough elements; when another
   dim has a smaller stride than the axis (axis 0 of a row-major matrix), a
   block of up to TN__CUM_LANES neighbouring lines advances together, so
   memory is walked in order.

   Gradients. cumsum: the reverse running sum of g (flip, cumsum, flip); its
   forward mode is itself (TN_OPF_LINEAR). cumprod, exactly with zeros (no
   division by x): d y_j / d x_i = prod_{k <= j, k != i} x_k for j >= i, and
   0 for j < i. For each line, M[i, j] is the running product along j of x
   with x_i replaced by 1 (one more dim: i before the axis), so
     vjp: gx_i = sum_{j >= i} g_j M[i, j]     jvp: dy_j = sum_{i <= j} t_i M[i, j].
   That is O(n^2) time and memory per line of n elements: meant for the
   lengths products are taken over (a product of thousands of factors under-
   or overflows anyway). GPU: the same loop as CUDA C (>>cum_cuda), which the
   CUDA back end's row (tensor_cuda.h >>cuda_cumulative) compiles. */

/* >>cum_kernel ------------------------------------------------------------ */
#define TN__CUM_LANES 256
#define TN__CUM_GRAIN 32768   /* elements per thread before splitting pays */

typedef struct tn__cumplan {
    const char *x;
    char *y;
    int64_t n, xs, ys;                                         /* the axis: length, byte strides */
    int nk;                                                    /* the other dims (size 1 dropped), innermost last */
    int64_t kn[TN_MAX_DIMS], kx[TN_MAX_DIMS], ky[TN_MAX_DIMS];
    int64_t lines;                                             /* product of kn */
    void (*row)(const char *x, int64_t n, int64_t xs, char *y, int64_t ys);
    void (*lanes)(const char *x, int64_t n, int64_t xs, int64_t nl, int64_t xl, char *y, int64_t ys, int64_t yl);
    bool use_lanes;
} tn__cumplan;

/* T: stored input, AT: accumulator, LOAD: T -> AT, OT: stored output, STORE:
   AT -> OT. As NumPy's accumulate, y[0] is x[0] itself (cumsum([-0.0]) is
   -0.0), then y[j] = y[j-1] OPC x[j] in the accumulator's type. n >= 1. */
#define TN__CUM_T(OP, OPC, SUF, T, AT, LOAD, OT, STORE) \
static void tn__cumrow_##OP##_##SUF(const char *x, int64_t n, int64_t xs, char *y, int64_t ys) { \
    AT acc = LOAD(*(const T *)(const void *)x); \
    *(OT *)(void *)y = STORE(acc); \
    for (int64_t j = 1; j < n; j++) { \
        T v = *(const T *)(const void *)(x + j * xs); \
        acc = acc OPC (LOAD(v)); \
        *(OT *)(void *)(y + j * ys) = STORE(acc); \
    } \
} \
static void tn__cumlanes_##OP##_##SUF(const char *x, int64_t n, int64_t xs, int64_t nl, int64_t xl, char *y, int64_t ys, int64_t yl) { \
    AT acc[TN__CUM_LANES]; \
    for (int64_t l = 0; l < nl; l++) { \
        acc[l] = LOAD(*(const T *)(const void *)(x + l * xl)); \
        *(OT *)(void *)(y + l * yl) = STORE(acc[l]); \
    } \
    for (int64_t j = 1; j < n; j++) { \
        const char *xp = x + j * xs; \
        char *yp = y + j * ys; \
        for (int64_t l = 0; l < nl; l++) { \
            T v = *(const T *)(const void *)(xp + l * xl); \
            acc[l] = acc[l] OPC (LOAD(v)); \
            *(OT *)(void *)(yp + l * yl) = STORE(acc[l]); \
        } \
    } \
}
#define TN__CUM_ID(v) (v)
#define TN__CUM_U64(v) ((uint64_t)(int64_t)(v))
#define TN__CUM_I64(acc) ((int64_t)(acc))
#define TN__CUM_OP(OP, OPC) \
    TN__CUM_T(OP, OPC, b8,  uint8_t,  uint64_t, TN__CUM_U64, int64_t,  TN__CUM_I64) \
    TN__CUM_T(OP, OPC, i32, int32_t,  uint64_t, TN__CUM_U64, int64_t,  TN__CUM_I64) \
    TN__CUM_T(OP, OPC, i64, int64_t,  uint64_t, TN__CUM_U64, int64_t,  TN__CUM_I64) \
    TN__CUM_T(OP, OPC, f16, uint16_t, float,    tn__ew_h2f,  uint16_t, tn__ew_f2h) \
    TN__CUM_T(OP, OPC, f32, float,    float,    TN__CUM_ID,  float,    TN__CUM_ID) \
    TN__CUM_T(OP, OPC, f64, double,   double,   TN__CUM_ID,  double,   TN__CUM_ID)
TN__CUM_OP(sum, +)
TN__CUM_OP(prod, *)
TN__STATIC_ASSERT(TN_DTYPE_COUNT == 7, "cumulative kernel tables list one column per dtype");

typedef void (*tn__cumrow_fn)(const char *, int64_t, int64_t, char *, int64_t);
typedef void (*tn__cumlanes_fn)(const char *, int64_t, int64_t, int64_t, int64_t, char *, int64_t, int64_t);
static const tn__cumrow_fn tn__cumrow[2][TN_DTYPE_COUNT] = {
    { NULL, tn__cumrow_sum_b8, tn__cumrow_sum_i32, tn__cumrow_sum_i64, tn__cumrow_sum_f16, tn__cumrow_sum_f32, tn__cumrow_sum_f64 },
    { NULL, tn__cumrow_prod_b8, tn__cumrow_prod_i32, tn__cumrow_prod_i64, tn__cumrow_prod_f16, tn__cumrow_prod_f32, tn__cumrow_prod_f64 },
};
static const tn__cumlanes_fn tn__cumlanes[2][TN_DTYPE_COUNT] = {
    { NULL, tn__cumlanes_sum_b8, tn__cumlanes_sum_i32, tn__cumlanes_sum_i64, tn__cumlanes_sum_f16, tn__cumlanes_sum_f32, tn__cumlanes_sum_f64 },
    { NULL, tn__cumlanes_prod_b8, tn__cumlanes_prod_i32, tn__cumlanes_prod_i64, tn__cumlanes_prod_f16, tn__cumlanes_prod_f32, tn__cumlanes_prod_f64 },
};

/* Byte offsets in x and y of flat line index o (row-major over the other dims). */
static void tn__cum_line(const tn__cumplan *P, int64_t o, int64_t *xo, int64_t *yo) {
    int64_t a = 0, b = 0;
    for (int d = P->nk - 1; d >= 0; d--) {
        int64_t i = o % P->kn[d];
        o /= P->kn[d];
        a += i * P->kx[d];
        b += i * P->ky[d];
    }
    *xo = a;
    *yo = b;
}

static void tn__cum_rows_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__cumplan *P = (const tn__cumplan *)ctx;
    for (int64_t o = lo; o < hi; o++) {
        int64_t xo, yo;
        tn__cum_line(P, o, &xo, &yo);
        P->row(P->x + xo, P->n, P->xs, P->y + yo, P->ys);
    }
}

/* Units of the lanes walk: TN__CUM_LANES neighbouring lines of the innermost other dim. */
static void tn__cum_lanes_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__cumplan *P = (const tn__cumplan *)ctx;
    int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__CUM_LANES - 1) / TN__CUM_LANES;
    for (int64_t u = lo; u < hi; u++) {
        int64_t outer = u / nb, j0 = (u % nb) * TN__CUM_LANES;
        int64_t nl = n0 - j0 < TN__CUM_LANES ? n0 - j0 : TN__CUM_LANES;
        int64_t xo, yo;
        tn__cum_line(P, outer * n0 + j0, &xo, &yo);
        P->lanes(P->x + xo, P->n, P->xs, nl, P->kx[P->nk - 1], P->y + yo, P->ys, P->ky[P->nk - 1]);
    }
}

/* The lines of x along axis, one per element of the other dims (x's shape
   but the axis; y may differ in the axis only): fills P's x, y, n (x's
   length), xs, ys, nk, kn, kx, ky (size-1 dims dropped, dims whose strides
   chain in both merged) and lines. */
static void tn__cum_plan_lines(tn__cumplan *P, const tn_array *x, tn_array *y, int axis) {
    P->x = (const char *)x->data;
    P->y = (char *)y->data;
    P->n = x->shape[axis];
    P->xs = x->strides[axis];
    P->ys = y->strides[axis];
    P->nk = 0;
    P->lines = 1;
    int64_t ks[2][TN_MAX_DIMS];     /* x, y */
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis || x->shape[d] == 1) continue;
        P->kn[P->nk] = x->shape[d]; ks[0][P->nk] = x->strides[d]; ks[1][P->nk] = y->strides[d];
        P->nk++;
        P->lines *= x->shape[d];
    }
    P->nk = tn__merge_dims(P->nk, P->kn, 2, ks);     /* dims whose strides chain merge */
    memcpy(P->kx, ks[0], sizeof(int64_t) * (size_t)P->nk);
    memcpy(P->ky, ks[1], sizeof(int64_t) * (size_t)P->nk);
}

static tn_result tn__cum_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    tn_array *y = out[0];
    int axis = tn__p_axis(&node->p), prod = node->op == TN_OP_CUMPROD;
    const char *name = tn__op_def(node->op)->name;
    char s1[128], s2[128];
    if (axis < 0 || axis >= x->ndim || y->ndim != x->ndim)
        return tn__err(TN_ERR_AXIS, "%s: axis %d does not fit an input of shape %s", name, axis, tn__shape_str(x->ndim, x->shape, s1));
    for (int d = 0; d < x->ndim; d++)
        if (y->shape[d] != x->shape[d])
            return tn__err(TN_ERR_SHAPE, "%s: output of shape %s for an input of shape %s", name, tn__shape_str(y->ndim, y->shape, s2),
                           tn__shape_str(x->ndim, x->shape, s1));
    if ((unsigned)x->dtype - 1u >= (unsigned)TN_DTYPE_COUNT - 1u || y->dtype != (tn_dtype_is_float(x->dtype) ? x->dtype : TN_I64))
        return tn__err(TN_ERR_DTYPE, "%s: input %s, output %s", name, tn_dtype_name(x->dtype), tn_dtype_name(y->dtype));
    tn__cumplan P;
    tn__cum_plan_lines(&P, x, y, axis);
    if (P.n == 0 || P.lines == 0) return TN_OK;
    P.row = tn__cumrow[prod][x->dtype];
    P.lanes = tn__cumlanes[prod][x->dtype];
    int64_t ls = P.nk > 0 ? P.kx[P.nk - 1] : 0, as = P.xs;
    P.use_lanes = P.nk > 0 && P.n > 1 && (ls < 0 ? -ls : ls) < (as < 0 ? -as : as);
    if (P.use_lanes) {
        int64_t n0 = P.kn[P.nk - 1], nb = (n0 + TN__CUM_LANES - 1) / TN__CUM_LANES;
        int64_t per = P.n * (n0 < TN__CUM_LANES ? n0 : TN__CUM_LANES);
        tn__parallel_for(P.lines / n0 * nb, TN__CUM_GRAIN / per + 1, tn__cum_lanes_range, &P);
    } else {
        tn__parallel_for(P.lines, TN__CUM_GRAIN / P.n + 1, tn__cum_rows_range, &P);
    }
    return TN_OK;
}

/* float16 <-> float in generated CUDA C: one PTX instruction each (NVRTC
   without cuda_fp16.h); what the generated sources of this file start with
   for a float16 kernel. */
#define TN__CUDA_F16_SRC \
    "__device__ __forceinline__ float tn_h2f(unsigned short h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n" \
    "__device__ __forceinline__ unsigned short tn_f2h(float f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"

/* >>cum_cuda ---------------------------------------------------------------- */
/* The same loop as CUDA C, for a back end that generates kernels (tensor_cuda.h's
   >>cuda_cumulative section compiles it with NVRTC): one thread per line of a
   contiguous (lines / inner, n, inner) array, sequential along the axis in the
   accumulator's type of the CPU kernel above (the TN__CUM_OP rows), so the GPU
   gives the CPU's bits. The kernel is extern "C" tn_cum(x, y, lines, n, inner).
   Returns the length snprintf reports, or -1 for a dtype without a kernel. */
TN_API int tn__cum_cuda_source(int op, tn_dtype t, char *buf, size_t cap) {
    static const char *const in_t[TN_DTYPE_COUNT]  = { NULL, "unsigned char", "int", "long long", "unsigned short", "float", "double" };
    static const char *const acc_t[TN_DTYPE_COUNT] = { NULL, "unsigned long long", "unsigned long long", "unsigned long long", "float", "float", "double" };
    static const char *const out_t[TN_DTYPE_COUNT] = { NULL, "long long", "long long", "long long", "unsigned short", "float", "double" };
    static const char *const load[TN_DTYPE_COUNT]  = { NULL, "(unsigned long long)(long long)", "(unsigned long long)(long long)", "(unsigned long long)(long long)", "tn_h2f", "", "" };
    static const char *const store[TN_DTYPE_COUNT] = { NULL, "(long long)", "(long long)", "(long long)", "tn_f2h", "", "" };
    if ((unsigned)t >= TN_DTYPE_COUNT || !in_t[t] || (op != TN_OP_CUMSUM && op != TN_OP_CUMPROD)) return -1;
    return snprintf(buf, cap,
        "%s"
        "extern \"C\" __global__ void tn_cum(const %s *__restrict__ x, %s *__restrict__ y, long long lines, long long n, long long inner) {\n"
        "    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (t >= lines) return;\n"
        "    const long long o = t / inner;\n"
        "    long long k = o * n * inner + (t - o * inner);\n"
        "    %s a = %s(x[k]);\n"
        "    y[k] = %s(a);\n"
        "    for (long long j = 1; j < n; j++) {\n"
        "        k += inner;\n"
        "        a = a %c %s(x[k]);\n"
        "        y[k] = %s(a);\n"
        "    }\n"
        "}\n",
        t == TN_F16 ? TN__CUDA_F16_SRC : "",
        in_t[t], out_t[t], acc_t[t], load[t], store[t], op == TN_OP_CUMSUM ? '+' : '*', load[t], store[t]);
}

/* >>cum_infer_label --------------------------------------------------------- */
static tn_result tn__cum_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    int axis = tn__p_axis(&node->p);
    if (axis < 0 || axis >= in[0].ndim) {
        char sb[128];
        return tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for an input of shape %s", tn__op_def(node->op)->name, axis,
                       tn__shape_str(in[0].ndim, in[0].shape, sb));
    }
    *out = in[0];
    out->dtype = tn_dtype_is_float(in[0].dtype) ? in[0].dtype : TN_I64;
    return TN_OK;
}

/* CumSum{axis=1} */
static void tn__cum_label(const tn_var *node, char *buf, size_t cap) {
    snprintf(buf, cap, "%s{axis=%d}", node->op == TN_OP_CUMSUM ? "CumSum" : "CumProd", tn__p_axis(&node->p));
}

/* >>cum_constructors ------------------------------------------------------- */
TN_API tn_var *tn_cumsum(tn_var *x, int axis) { return tn__axis_op_make("tn_cumsum", TN_OP_CUMSUM, x, axis); }
TN_API tn_var *tn_cumprod(tn_var *x, int axis) { return tn__axis_op_make("tn_cumprod", TN_OP_CUMPROD, x, axis); }

/* >>cum_grad --------------------------------------------------------------- */
static tn_var *tn__cum_flip(tn_var *v, int axis) { return v ? tn_slice(v, axis, TN_NONE, TN_NONE, -1) : NULL; }

static tn_result tn__cumsum_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    int axis = tn__p_axis(&node->p);
    gin[0] = tn__cum_flip(tn_cumsum(tn__cum_flip(g, axis), axis), axis);
    return gin[0] ? TN_OK : tn__gfail("CumSum", node);
}

/* M[.., i, j, ..] (i at the axis, j after it) and the mask j >= i: see above. */
static tn_result tn__cumprod_partials(tn_var *node, tn_var **M, tn_var **upper, int *pi, int *pj) {
    tn_var *x = node->in[0];
    int a = tn__p_axis(&node->p), nd = x->type.ndim;
    char nb[64];
    if (nd + 1 > TN_MAX_DIMS)
        return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the derivative of CumProd of '%s' needs one dim more than its %d (at most %d)",
                       tn__gname(x, nb), nd, TN_MAX_DIMS);
    for (int d = 0, s = 0; d <= nd; d++) pi[d] = d == a + 1 ? -1 : s++;   /* x's axis as i, a new dim after it */
    for (int d = 0, s = 0; d <= nd; d++) pj[d] = d == a ? -1 : s++;       /* a new dim, then x's axis as j */
    tn_var *idx = tn_cumsum(tn_fill(x, tn__glit(x, TN_I64, 1.0)), a);     /* 1, 2, ..., n along the axis */
    tn_var *ii = tn_dimshuffle(idx, nd + 1, pi), *ij = tn_dimshuffle(idx, nd + 1, pj);
    tn_var *z = tn_where(tn_eq(ii, ij), tn_lit(x, 1.0), tn_dimshuffle(x, nd + 1, pj));
    *M = tn_cumprod(z, a + 1);
    *upper = tn_ge(ij, ii);
    return *M && *upper ? TN_OK : tn__gfail("CumProd", node);
}

static tn_result tn__cumprod_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *M, *upper;
    int pi[TN_MAX_DIMS], pj[TN_MAX_DIMS], nd = node->type.ndim, j = tn__p_axis(&node->p) + 1;
    tn_result r = tn__cumprod_partials(node, &M, &upper, pi, pj);
    if (r != TN_OK) return r;
    tn_var *G = tn_dimshuffle(g, nd + 1, pj);
    gin[0] = tn_sum(tn_where(upper, tn_mul(M, G), tn_lit(g, 0.0)), &j, 1, false);
    return gin[0] ? TN_OK : tn__gfail("CumProd", node);
}

static tn_result tn__cumprod_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var *M, *upper;
    int pi[TN_MAX_DIMS], pj[TN_MAX_DIMS], nd = node->type.ndim, i = tn__p_axis(&node->p);
    if (!t[0]) return TN_OK;
    tn_result r = tn__cumprod_partials(node, &M, &upper, pi, pj);
    if (r != TN_OK) return r;
    tn_var *T = tn_dimshuffle(t[0], nd + 1, pi);
    *out = tn_sum(tn_where(upper, tn_mul(M, T), tn_lit(t[0], 0.0)), &i, 1, false);
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

/* >>cum_rows: this part's rows of the op table (the >>ops_table section) --- */
/* TN_OPK_OTHER: neither a reduction nor a shape op; the GPU runs them through their own
   row of the CUDA table (tensor_cuda.h >>cuda_cumulative). */
#define TN__CUM_OP_ROWS \
    { .op = TN_OP_CUMSUM, .name = "CumSum", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__cum_infer, .cpu = tn__cum_cpu, \
                       .label = tn__cum_label, .vjp = tn__cumsum_vjp, .flags = TN_OPF_LINEAR }, \
    { .op = TN_OP_CUMPROD, .name = "CumProd", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__cum_infer, .cpu = tn__cum_cpu, \
                        .label = tn__cum_label, .vjp = tn__cumprod_vjp, .jvp = tn__cumprod_jvp },

/* >>ops_conv ========================================================== */
/* Convolutions and pooling, built on two ops that move windows around and
   the products and reductions the library has:

   IM2COL(x), x an (N, C, in...) image: out (G, Cg*K, N, L), G groups of Cg
   channels, K the kernel's size, L the output grid's size; row r = c*K + k
   (c the channel in its group, k the window position, row-major), image n
   and grid position l (row-major) hold x[n, g*Cg + c, o*s - plo + k*dl],
   or the padding value (0; -inf for max pooling) outside the image. The
   batch sits next to the grid so one product per group (a batch of G)
   covers every image: (G, C_out/G, Cg*K) . (G, Cg*K, N*L).
   COL2IM(cols) is its transpose: each image element is the sum of the
   column entries that read it (the gradient of IM2COL, and IM2COL the
   gradient of COL2IM; both linear). Both are gathers (one output element
   at a time, in a fixed order, accumulated in float32 for float16/float32,
   double for float64), on the CPU and the GPU alike, so the GPU gives the
   CPU's bits.

   conv(x, w) = (N, C_out, out...) of dot(reshape(w, (G, Co/G, Cg*K)),
   IM2COL(x) as (G, Cg*K, N*L)); conv_transpose(x, w) = COL2IM(dot(w^T per
   group, x as (G, Ci/G, N*L))) (the gradient of a conv with respect to its
   input). The gradients come from the pieces: a conv's with respect to its
   input is a COL2IM of a product, to its filters a product with IM2COL(x).
   Cost: the columns are Cg*K times the image; the CPU product is CBLAS's,
   the GPU's cuBLAS's batched one.

   POOL(x): max or average pooling, one op that reads each window from the
   image (x read once, the result written once: a 2x2 pool moves 1.25x the
   image, where IM2COL + a reduction of its rows wrote and read columns as
   big as x again). Its results are the bits that path gave (>>pool_cpu: the
   same fold order and accumulator). Its gradient is POOL_GRAD(x, y, gy),
   one pass too (>>pool_grad_cpu), with the bits of that path's gradient
   (IM2COL, the reduction's rule, COL2IM): max pooling gives the gradient to
   every element equal to the window's max (ties share it, as Theano;
   PyTorch picks one). */

/* >>conv_geometry ------------------------------------------------------------ */
typedef struct tn__cgeo {
    int nsp, G;
    int64_t k[3], s[3], plo[3], phi[3], dl[3], in[3], out[3];
    int64_t N, C, Cg, K, L;
    double padv;
} tn__cgeo;

/* The geometry of a node's params and its image's (N, C); out sizes computed. */
static void tn__cgeo_of(const tn_params *p, int64_t N, int64_t C, tn__cgeo *g) {
    memset(g, 0, sizeof *g);
    g->nsp = tn__p_conv_nsp(p);
    g->G = tn__p_conv_groups(p);
    g->N = N; g->C = C; g->Cg = g->G > 0 ? C / g->G : 0;
    g->K = 1; g->L = 1;
    g->padv = tn__p_conv_padv(p);
    for (int d = 0; d < g->nsp; d++) {
        g->k[d] = tn__p_conv_at(p, TN__CONV_K, d); g->s[d] = tn__p_conv_at(p, TN__CONV_S, d);
        g->plo[d] = tn__p_conv_at(p, TN__CONV_PLO, d); g->phi[d] = tn__p_conv_at(p, TN__CONV_PHI, d);
        g->dl[d] = tn__p_conv_at(p, TN__CONV_DL, d); g->in[d] = tn__p_conv_at(p, TN__CONV_IN, d);
        int64_t span = g->dl[d] * (g->k[d] - 1) + 1, room = g->in[d] + g->plo[d] + g->phi[d];
        g->out[d] = room >= span && g->s[d] > 0 ? (room - span) / g->s[d] + 1 : 0;
        g->K *= g->k[d];
        g->L *= g->out[d];
    }
}

/* >>conv_cpu ------------------------------------------------------------------ */
/* The CPU kernels: im2col by output lines, col2im by image planes (float16:
   by elements, accumulated in float32). */
typedef struct tn__cjob {
    const tn__cgeo *g;
    const char *x;
    const int64_t *xs;     /* the input's byte strides (image or columns) */
    char *y;               /* contiguous output */
    int64_t n;
} tn__cjob;

/* 2-d, stride 1, output rows as long as the image's, unit steps along them
   (elem: the element size; rows: the image's and the columns' row steps as
   the kernels see them): a window position's column line is the image plane
   shifted by whole rows and a few elements (im2col, col2im). */
static inline bool tn__cgeo_shifted(const tn__cgeo *g, int64_t elem, int64_t xstep, int64_t rowstep) {
    return g->nsp == 2 && g->s[0] == 1 && g->s[1] == 1 && g->out[1] == g->in[1] && xstep == elem && rowstep == g->in[1] * elem;
}

/* For those: the shift a of window row kd0 (output row r reads image row
   r + a) and the output rows [*rlo, *rhi) that read inside the image, within
   the Q output rows (*rhi >= *rlo). */
static inline int64_t tn__cgeo_rows(const tn__cgeo *g, int64_t kd0, int64_t Q, int64_t *rlo, int64_t *rhi) {
    int64_t a = kd0 * g->dl[0] - g->plo[0];
    *rlo = a >= 0 ? 0 : -a;
    *rhi = g->in[0] - a;
    if (*rlo > Q) *rlo = Q;
    if (*rhi > Q) *rhi = Q;
    if (*rhi < *rlo) *rhi = *rlo;
    return a;
}

/* x's (n, c, i...) element offset, or -1 outside the image: i = o*s - plo + k*dl. */
static inline int64_t tn__cgeo_src(const tn__cgeo *g, const int64_t *xs, int64_t n, int64_t c, int64_t kidx, int64_t l) {
    int64_t off = n * xs[0] + c * xs[1];
    for (int d = g->nsp - 1; d >= 0; d--) {
        int64_t kd = kidx % g->k[d], od = l % g->out[d];
        kidx /= g->k[d]; l /= g->out[d];
        int64_t i = od * g->s[d] - g->plo[d] + kd * g->dl[d];
        if (i < 0 || i >= g->in[d]) return -1;
        off += i * xs[2 + d];
    }
    return off;
}

/* im2col by lines: line (group, row, image) of the output is L contiguous
   elements; the window position's offsets are found once a line, and along
   the grid's last dim the part inside the image once (padding either side).
   A line that is its image plane as it lies (stride 1, the plane's size, no
   shift: a 1x1 window, or the centre tap of a 'same' window) is one copy;
   in 2-d with stride 1 and output rows as long as the image's (a 'same'
   window), a line is the plane shifted by whole rows and a few elements: one
   copy, then the elements the shift brought in from the neighbouring rows
   or from outside the image set to the pad. */
#define TN__CONV_T(SUF, T, AT, STORE) \
static void tn__im2col_##SUF(void *ctx, int64_t lo, int64_t hi) { \
    const tn__cjob *J = (const tn__cjob *)ctx; \
    const tn__cgeo *g = J->g; \
    T pad = STORE((AT)g->padv); \
    int e = g->nsp - 1; \
    int64_t R = g->Cg * g->K, W = g->out[e], Q = W ? g->L / W : 0, se = g->s[e], xse = J->xs[2 + e]; \
    bool shifted = tn__cgeo_shifted(g, (int64_t)sizeof(T), xse, J->xs[2]); \
    for (int64_t line = lo; line < hi; line++) { \
        int64_t n = line % g->N, row = line / g->N, gi = row / R, r = row % R, kidx = r % g->K, kd[3]; \
        for (int d = e; d >= 0; d--) { kd[d] = kidx % g->k[d]; kidx /= g->k[d]; } \
        const char *xb = J->x + n * J->xs[0] + (gi * g->Cg + r / g->K) * J->xs[1]; \
        T *y = (T *)(void *)J->y + line * g->L; \
        bool plane = true;          /* the window position reads the image plane as it lies (a 1x1 window, a centre tap) */ \
        for (int d = e; d >= 0 && plane; d--) \
            plane = g->s[d] == 1 && g->out[d] == g->in[d] && kd[d] * g->dl[d] == g->plo[d] && \
                    J->xs[2 + d] == (d == e ? (int64_t)sizeof(T) : J->xs[3 + d] * g->in[d + 1]); \
        if (plane) { memcpy(y, xb, (size_t)g->L * sizeof(T)); continue; } \
        int64_t b = kd[e] * g->dl[e] - g->plo[e];          /* i = o*se + b along the last dim */ \
        int64_t olo = b >= 0 ? 0 : (-b + se - 1) / se, ohi = g->in[e] - b <= 0 ? 0 : (g->in[e] - b + se - 1) / se; \
        if (olo > W) olo = W; \
        if (ohi > W) ohi = W; \
        if (ohi < olo) ohi = olo; \
        if (shifted) {      /* the plane moved by a rows and b elements: one copy, then the pads */ \
            int64_t rlo, rhi, a = tn__cgeo_rows(g, kd[0], Q, &rlo, &rhi); \
            if (olo == ohi) rhi = rlo; \
            if (rhi > rlo) {   /* y[f] = x[f + a W + b] from row rlo's column olo to row rhi - 1's column ohi - 1 */ \
                int64_t f0 = rlo * W + olo, f1 = (rhi - 1) * W + ohi; \
                memcpy(y + f0, (const T *)(const void *)xb + f0 + a * W + b, (size_t)(f1 - f0) * sizeof(T)); \
                for (int64_t r = rlo; r < rhi; r++) { \
                    for (int64_t o = 0; o < olo; o++) y[r * W + o] = pad; \
                    for (int64_t o = ohi; o < W; o++) y[r * W + o] = pad; \
                } \
            } \
            for (int64_t f = 0; f < rlo * W; f++) y[f] = pad; \
            for (int64_t f = rhi * W; f < g->L; f++) y[f] = pad; \
            continue; \
        } \
        int64_t oc[3] = { 0, 0, 0 };                         /* q's output index along the dims before the last */ \
        for (int64_t q = 0; q < Q; q++, y += W) { \
            int64_t off = 0; \
            bool inside = true; \
            for (int d = e - 1; d >= 0; d--) { \
                int64_t i = oc[d] * g->s[d] - g->plo[d] + kd[d] * g->dl[d]; \
                inside = inside && i >= 0 && i < g->in[d]; \
                off += i * J->xs[2 + d]; \
            } \
            for (int d = e - 1; d >= 0 && ++oc[d] == g->out[d]; d--) oc[d] = 0;   /* the next q, without a division */ \
            int64_t o = 0; \
            if (inside) { \
                for (; o < olo; o++) y[o] = pad; \
                if (se == 1 && xse == (int64_t)sizeof(T)) { \
                    memcpy(y + o, xb + off + (o + b) * xse, (size_t)(ohi - o) * sizeof(T)); \
                    o = ohi; \
                } \
                for (; o < ohi; o++) y[o] = *(const T *)(const void *)(xb + off + (o * se + b) * xse); \
            } \
            for (; o < W; o++) y[o] = pad; \
        } \
    } \
}
/* col2im by elements: each image element sums the column entries that read
   it, in window-position order, in float32 (the float16 path). */
#define TN__COL2IM_GATHER(SUF, T, AT, LOAD, STORE) \
static void tn__col2im_##SUF(void *ctx, int64_t lo, int64_t hi) { \
    const tn__cjob *J = (const tn__cjob *)ctx; \
    const tn__cgeo *g = J->g; \
    int64_t S = 1; \
    for (int d = 0; d < g->nsp; d++) S *= g->in[d]; \
    for (int64_t t = lo; t < hi; t++) { \
        int64_t sp = t % S, c = (t / S) % g->C, n = t / S / g->C, gi = c / g->Cg, cr = c % g->Cg; \
        int64_t id[3], rem = sp; \
        for (int d = g->nsp - 1; d >= 0; d--) { id[d] = rem % g->in[d]; rem /= g->in[d]; } \
        AT acc = 0; \
        int64_t kd[3] = { 0, 0, 0 };    /* the window position of kidx, counted */ \
        for (int64_t kidx = 0; kidx < g->K; kidx++) { \
            int64_t l = 0, mul = 1; \
            bool ok = true; \
            for (int d = g->nsp - 1; d >= 0 && ok; d--) { \
                int64_t num = id[d] + g->plo[d] - kd[d] * g->dl[d], q = g->s[d] == 1 ? num : num / g->s[d]; \
                if (num < 0 || q * g->s[d] != num || q >= g->out[d]) ok = false; \
                else { l += q * mul; mul *= g->out[d]; } \
            } \
            for (int d = g->nsp - 1; d >= 0; d--) { if (++kd[d] < g->k[d]) break; kd[d] = 0; } \
            if (!ok) continue; \
            int64_t off = gi * J->xs[0] + (cr * g->K + kidx) * J->xs[1] + n * J->xs[2] + l * J->xs[3]; \
            acc += LOAD(*(const T *)(const void *)(J->x + off)); \
        } \
        ((T *)(void *)J->y)[t] = STORE(acc); \
    } \
}
#define TN__CONV_ID(v) (v)
#define TN__CONV_F2H(v) tn__ew_f2h((float)(v))
TN__CONV_T(f16, uint16_t, float, TN__CONV_F2H)
TN__CONV_T(f32, float, float, TN__CONV_ID)
TN__CONV_T(f64, double, double, TN__CONV_ID)
TN__COL2IM_GATHER(f16, uint16_t, float, tn__ew_h2f, TN__CONV_F2H)

/* col2im by image planes where the element type is the accumulator (float32,
   float64): plane (n, c) is zeroed, then the column line of each window
   position is added into it, window positions in order. A window position
   reaches an image element at most once, so every element sees the
   additions of the gather above in its order: the same bits, with the
   columns read line by line instead of K lines at once per element. */
#define TN__COL2IM_PLANES(SUF, T) \
static void tn__col2im_planes_##SUF(void *ctx, int64_t lo, int64_t hi) { \
    const tn__cjob *J = (const tn__cjob *)ctx; \
    const tn__cgeo *g = J->g; \
    int e = g->nsp - 1; \
    int64_t S = 1, ist[3], W = g->out[e], Q = W ? g->L / W : 0, se = g->s[e], xl = J->xs[3]; \
    for (int d = e; d >= 0; d--) { ist[d] = S; S *= g->in[d]; } \
    bool shifted = tn__cgeo_shifted(g, (int64_t)sizeof(T), xl, xl * W); \
    for (int64_t p = lo; p < hi; p++) { \
        int64_t n = p / g->C, c = p % g->C, gi = c / g->Cg, cr = c % g->Cg, kd[3] = { 0, 0, 0 }; \
        T *y = (T *)(void *)J->y + p * S; \
        for (int64_t i = 0; i < S; i++) y[i] = 0; \
        for (int64_t kidx = 0; kidx < g->K; kidx++) { \
            const char *line = J->x + gi * J->xs[0] + (cr * g->K + kidx) * J->xs[1] + n * J->xs[2]; \
            int64_t b = kd[e] * g->dl[e] - g->plo[e]; \
            int64_t olo = b >= 0 ? 0 : (-b + se - 1) / se, ohi = g->in[e] - b <= 0 ? 0 : (g->in[e] - b + se - 1) / se; \
            if (olo > W) olo = W; \
            if (ohi > W) ohi = W; \
            if (shifted) {   /* as im2col's: column row r adds into image row r + a, shifted by b */ \
                int64_t rlo, rhi, a = tn__cgeo_rows(g, kd[0], Q, &rlo, &rhi); \
                for (int64_t r = rlo; r < rhi && olo < ohi; r++) { \
                    T *TN__RESTRICT yo = y + (r + a) * W + b; \
                    const T *TN__RESTRICT xo = (const T *)(const void *)line + r * W; \
                    int64_t o = olo; \
                    for (; o + 4 <= ohi; o += 4) { yo[o] += xo[o]; yo[o + 1] += xo[o + 1]; yo[o + 2] += xo[o + 2]; yo[o + 3] += xo[o + 3]; } \
                    for (; o < ohi; o++) yo[o] += xo[o]; \
                } \
                for (int d = e; d >= 0; d--) { if (++kd[d] < g->k[d]) break; kd[d] = 0; } \
                continue; \
            } \
            int64_t oc[3] = { 0, 0, 0 };                     /* q's output index along the dims before the last */ \
            for (int64_t q = 0; q < Q && olo < ohi; q++) { \
                int64_t off = b; \
                bool inside = true; \
                for (int d = e - 1; d >= 0; d--) { \
                    int64_t i = oc[d] * g->s[d] - g->plo[d] + kd[d] * g->dl[d]; \
                    inside = inside && i >= 0 && i < g->in[d]; \
                    off += i * ist[d]; \
                } \
                for (int d = e - 1; d >= 0 && ++oc[d] == g->out[d]; d--) oc[d] = 0;   /* the next q, without a division */ \
                if (!inside) continue; \
                const char *xr = line + q * W * xl; \
                if (se == 1 && xl == (int64_t)sizeof(T)) {     /* unit steps: the same additions, without the stride products */ \
                    T *yo = y + off; \
                    const T *xo = (const T *)(const void *)xr; \
                    for (int64_t o = olo; o < ohi; o++) yo[o] += xo[o]; \
                } else \
                    for (int64_t o = olo; o < ohi; o++) y[off + o * se] += *(const T *)(const void *)(xr + o * xl); \
            } \
            for (int d = e; d >= 0; d--) { if (++kd[d] < g->k[d]) break; kd[d] = 0; } \
        } \
    } \
}
TN__COL2IM_PLANES(f32, float)
TN__COL2IM_PLANES(f64, double)

static tn_result tn__conv_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    tn_array *y = out[0];
    bool fwd = node->op == TN_OP_IM2COL;
    const tn_array *img = fwd ? x : y;
    tn__cgeo g;
    tn__cgeo_of(&node->p, img->shape[0], fwd ? x->shape[1] : y->shape[1], &g);
    if (!tn_array_is_contiguous(y) || (x->dtype != TN_F16 && x->dtype != TN_F32 && x->dtype != TN_F64) || y->dtype != x->dtype)
        return tn__err(TN_ERR_INTERNAL, "%s: a contiguous float output of the input's dtype expected", tn__op_def(node->op)->name);
    tn__cjob J = { &g, (const char *)x->data, x->strides, (char *)y->data, tn_array_size(y) };
    if (J.n == 0) return TN_OK;
    static void (*const im2col[3])(void *, int64_t, int64_t) = { tn__im2col_f16, tn__im2col_f32, tn__im2col_f64 };
    if (fwd) tn__parallel_for(J.n / g.L, 16384 / g.L + 1, im2col[x->dtype - TN_F16], &J);          /* lines of L elements */
    else if (x->dtype == TN_F16) tn__parallel_for(J.n, 16384 / g.K + 1, tn__col2im_f16, &J);            /* elements of K reads */
    else {                                                                                           /* planes of K lines */
        int64_t S = J.n / (g.N * g.C);
        tn__parallel_for(g.N * g.C, 16384 / (S * g.K) + 1, x->dtype == TN_F32 ? tn__col2im_planes_f32 : tn__col2im_planes_f64, &J);
    }
    return TN_OK;
}

/* >>pool_cpu ------------------------------------------------------------------ */
/* POOL: one output element each, its window's positions taken in IM2COL's
   row order and folded as the reduction of IM2COL's rows folds them (the
   >>ops_reduce section), so the result has that path's bits: a double
   accumulator, padding -inf for max (NaN wins) and 0 for average. The
   reduction walks the rows one after the other, except where the columns
   hold one position per row (N*L == 1: its box loop over a contiguous run),
   which folds four partial sums (four partial maxima from 8 positions) and
   combines them; so does this kernel (box). Average: the sum / K, stored;
   in-image positions only: the sum stored in the dtype, then divided by the
   count in the dtype's arithmetic (float for float16), as the division of
   the stored sum by a constant did. A window inside the image (and K <= 64,
   no box) reads through offsets found once a call and folds the same way:
   the sum in order; the max without a branch, then the last NaN if any (what
   TN__POOL_STEP's "NaN wins" leaves). A line's run of 16 or more such
   windows (float32 and float64) goes to J->line, the same folds for 16
   outputs at once (tn__pool_line_fn). */
/* Outputs [0, n) of a line whose windows lie inside the image: output t's
   window starts at b + t * step bytes, its positions at koff[0..K-1]. */
typedef void (*tn__pool_line_fn)(const char *b, int64_t step, const int64_t *koff, int64_t K, int mode, int64_t n, void *y);
typedef struct tn__pjob {
    const tn__cgeo *g;
    const char *x;
    const int64_t *xs;     /* the image's byte strides */
    char *y;               /* contiguous (N, C, out...) */
    int mode;
    bool box;
    tn__pool_line_fn line; /* float32/64 at the CPU's vector level; NULL: output by output */
} tn__pjob;

/* tn__pool_line_fn, the windows inside the image across outputs, n a
   multiple of 16: the folds of TN__POOL_T's inside path lane by lane, in
   its order and types (the max as T, exact as the double it compares; the
   sum in double), so the same bits at every level; 16 outputs a pass,
   window positions outer and outputs inner (loops of a fixed count, which
   -O2 vectorises; a stride of 1 or 2 elements read as such, others by
   offset), built for each vector level (TN__POOL_LINE_AT). GCC's -O2 cost
   model leaves a load of every other element scalar (pooling's usual
   stride of 2), so these take its dynamic one (TN__VEC_DYNAMIC). */
#if defined(__GNUC__) && !defined(__clang__)
#define TN__VEC_DYNAMIC __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define TN__VEC_DYNAMIC
#endif
#define TN__POOL_LINE_LOOP(T, BODY) do { \
        if (step == (int64_t)sizeof(T)) for (int t = 0; t < 16; t++) { T v = ((const T *)(const void *)bj)[t]; BODY } \
        else if (step == 2 * (int64_t)sizeof(T)) for (int t = 0; t < 16; t++) { T v = ((const T *)(const void *)bj)[2 * t]; BODY } \
        else for (int t = 0; t < 16; t++) { T v = *(const T *)(const void *)(bj + t * step); BODY } \
    } while (0)
#define TN__POOL_LINE_T(NAME, T, SEL, AVG, EXCL, ATTR) \
ATTR TN__VEC_DYNAMIC static void NAME(const char *b, int64_t step, const int64_t *koff, int64_t K, int mode, int64_t n, void *y_) { \
    T *y = (T *)y_; \
    for (int64_t t0 = 0; t0 < n; t0 += 16) { \
        const char *b0 = b + t0 * step; \
        T *yt = y + t0; \
        if (mode == TN__POOL_MAX) { \
            T mx[16], nv[16]; \
            for (int t = 0; t < 16; t++) { mx[t] = (T)-INFINITY; nv[t] = 0; } \
            for (int64_t j = 0; j < K; j++) { \
                const char *bj = b0 + koff[j]; \
                TN__POOL_LINE_LOOP(T, mx[t] = SEL(v > mx[t], v, mx[t]); nv[t] = SEL(v != v, v, nv[t]);); \
            } \
            for (int t = 0; t < 16; t++) yt[t] = SEL(nv[t] != nv[t], nv[t], mx[t]); \
        } else { \
            double acc[16]; \
            for (int t = 0; t < 16; t++) acc[t] = 0.0; \
            for (int64_t j = 0; j < K; j++) { \
                const char *bj = b0 + koff[j]; \
                TN__POOL_LINE_LOOP(T, acc[t] += (double)v;); \
            } \
            if (mode == TN__POOL_AVG) for (int t = 0; t < 16; t++) yt[t] = AVG(acc[t], K); \
            else for (int t = 0; t < 16; t++) yt[t] = EXCL(acc[t], K); \
        } \
    } \
}
#define TN__POOL_STEP(MX, D, v) do { if (MX) { if ((v) > (D) || (v) != (v)) (D) = (v); } else (D) += (v); } while (0)
#define TN__POOL_T(SUF, T, LOAD, STORE, EXCL) \
static void tn__pool_##SUF(void *ctx, int64_t lo, int64_t hi) { \
    const tn__pjob *J = (const tn__pjob *)ctx; \
    const tn__cgeo *g = J->g; \
    const int nsp = g->nsp; \
    bool mx = J->mode == TN__POOL_MAX; \
    double pad = mx ? -INFINITY : 0.0; \
    int64_t K = g->K, lim = !J->box ? 0 : mx ? (K >= 8 ? K / 4 * 4 : 0) : K / 4 * 4; \
    const int e = nsp - 1; \
    const int64_t W = g->out[e], LW = g->L / W; \
    int64_t koff[64];          /* the window's byte offsets in its order, for windows inside the image */ \
    bool direct = K <= 64 && !lim; \
    for (int64_t j = 0, kd[3] = { 0 }; direct && j < K; j++) { \
        koff[j] = 0; \
        for (int d = 0; d < nsp; d++) koff[j] += kd[d] * g->dl[d] * J->xs[2 + d]; \
        for (int d = nsp - 1; d >= 0 && ++kd[d] == g->k[d]; d--) kd[d] = 0; \
    } \
    for (int64_t line = lo; line < hi; line++) {   /* W outputs along the last dim: the divisions once a line */ \
        int64_t nc = line / LW, rem = line % LW, i0[3] = { 0 }, lineoff = 0; \
        const char *base = J->x + nc / g->C * J->xs[0] + nc % g->C * J->xs[1]; \
        for (int d = e - 1; d >= 0; d--) { i0[d] = rem % g->out[d] * g->s[d] - g->plo[d]; rem /= g->out[d]; } \
        i0[e] = -g->plo[e]; \
        bool rows_in = direct;     /* the window inside the image along the dims before the last */ \
        for (int d = 0; d < e; d++) { \
            rows_in = rows_in && i0[d] >= 0 && i0[d] + (g->k[d] - 1) * g->dl[d] < g->in[d]; \
            lineoff += i0[d] * J->xs[2 + d]; \
        } \
        /* the outputs [ta, tb) of the line whose windows lie inside along the last dim too: J->line's */ \
        int64_t ta = (g->plo[e] + g->s[e] - 1) / g->s[e], tin = g->in[e] - 1 - (g->k[e] - 1) * g->dl[e] + g->plo[e]; \
        int64_t tb = tin < 0 ? 0 : tin / g->s[e] + 1 < W ? tin / g->s[e] + 1 : W; \
        int64_t across = rows_in && J->line ? (tb - ta) / 16 * 16 : 0;   /* the rest output by output */ \
        for (int64_t t = line * W; t < (line + 1) * W; t++, i0[e] += g->s[e]) { \
            if (across > 0 && t == line * W + ta) { \
                J->line(base + lineoff + i0[e] * J->xs[2 + e], g->s[e] * J->xs[2 + e], koff, K, J->mode, across, (T *)(void *)J->y + t); \
                t += across - 1; \
                i0[e] += (across - 1) * g->s[e]; \
                continue; \
            } \
            if (rows_in && i0[e] >= 0 && i0[e] + (g->k[e] - 1) * g->dl[e] < g->in[e]) {   /* inside: the same folds, offsets found once */ \
                const char *b = base + lineoff + i0[e] * J->xs[2 + e]; \
                double D = pad, nanv = 0; \
                bool nan = false;   /* max: the larger without a branch; a NaN wins, the last one as TN__POOL_STEP keeps it */ \
                if (!mx) \
                    for (int64_t j = 0; j < K; j++) D += (double)LOAD(*(const T *)(const void *)(b + koff[j])); \
                else \
                    for (int64_t j = 0; j < K; j++) { \
                        double v = (double)LOAD(*(const T *)(const void *)(b + koff[j])); \
                        D = v > D ? v : D; \
                        if (v != v) { nan = true; nanv = v; } \
                    } \
                if (nan) D = nanv; \
                T *yp = (T *)(void *)J->y + t; \
                if (J->mode == TN__POOL_AVG_EXCL) *yp = EXCL(D, K); \
                else *yp = STORE(J->mode == TN__POOL_AVG ? D / (double)K : D); \
                continue; \
            } \
            int64_t kd[3] = { 0 }, cnt = 0; \
            double D = pad, P[4] = { pad, pad, pad, pad }; \
            for (int64_t j = 0; j < K; j++) {   /* the window row-major, as IM2COL's rows */ \
                int64_t off = 0; \
                bool in = true; \
                for (int d = 0; d < nsp; d++) { \
                    int64_t i = i0[d] + kd[d] * g->dl[d]; \
                    in = in && i >= 0 && i < g->in[d]; \
                    off += i * J->xs[2 + d]; \
                } \
                double v = in ? (double)LOAD(*(const T *)(const void *)(base + off)) : pad; \
                cnt += in; \
                if (j < lim) TN__POOL_STEP(mx, P[j & 3], v); \
                else { \
                    if (j == lim && lim) TN__POOL_COMBINE(mx, D, P); \
                    TN__POOL_STEP(mx, D, v); \
                } \
                for (int d = nsp - 1; d >= 0 && ++kd[d] == g->k[d]; d--) kd[d] = 0; \
            } \
            if (lim == K && lim) TN__POOL_COMBINE(mx, D, P); \
            T *yp = (T *)(void *)J->y + t; \
            if (J->mode == TN__POOL_AVG_EXCL) *yp = EXCL(D, cnt); \
            else *yp = STORE(J->mode == TN__POOL_AVG ? D / (double)K : D); \
        } \
    } \
}
/* The reduction's combination of its four partial results (its box loop). */
#define TN__POOL_COMBINE(MX, D, P) do { \
        if (MX) { for (int q = 0; q < 4; q++) TN__POOL_STEP(1, D, P[q]); } \
        else (D) += ((P)[0] + (P)[1]) + ((P)[2] + (P)[3]); \
    } while (0)
#define TN__POOL_F16_ST(d) tn_f32_to_f16((float)(d))
#define TN__POOL_F16_EX(s, c) tn__ew_f2h(tn__ew_h2f(TN__POOL_F16_ST(s)) / tn__ew_h2f(tn_f32_to_f16((float)(c))))
#define TN__POOL_F32_ST(d) ((float)(d))
#define TN__POOL_F32_EX(s, c) ((float)(s) / (float)(c))
#define TN__POOL_F64_EX(s, c) ((s) / (double)(c))
TN__POOL_T(f16, uint16_t, tn_f16_to_f32, TN__POOL_F16_ST, TN__POOL_F16_EX)
TN__POOL_T(f32, float, TN__CONV_ID, TN__POOL_F32_ST, TN__POOL_F32_EX)
TN__POOL_T(f64, double, TN__CONV_ID, TN__CONV_ID, TN__POOL_F64_EX)
#define TN__POOL_F32_AVG(s, k) ((float)((s) / (double)(k)))
#define TN__POOL_F64_AVG(s, k) ((s) / (double)(k))
TN__POOL_LINE_T(tn__pool_line_f32_0, float, tn__vm_sel, TN__POOL_F32_AVG, TN__POOL_F32_EX, )
TN__POOL_LINE_T(tn__pool_line_f64_0, double, tn__vm_seld, TN__POOL_F64_AVG, TN__POOL_F64_EX, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
TN__POOL_LINE_T(tn__pool_line_f32_1, float, tn__vm_sel, TN__POOL_F32_AVG, TN__POOL_F32_EX, __attribute__((target("avx2"))))
TN__POOL_LINE_T(tn__pool_line_f64_1, double, tn__vm_seld, TN__POOL_F64_AVG, TN__POOL_F64_EX, __attribute__((target("avx2"))))
TN__POOL_LINE_T(tn__pool_line_f32_2, float, tn__vm_sel, TN__POOL_F32_AVG, TN__POOL_F32_EX, __attribute__((target("avx512f"))))
TN__POOL_LINE_T(tn__pool_line_f64_2, double, tn__vm_seld, TN__POOL_F64_AVG, TN__POOL_F64_EX, __attribute__((target("avx512f"))))
#define TN__POOL_LINE_AT(f, lv) ((lv) == 2 ? f##2 : (lv) == 1 ? f##1 : f##0)
#else
#define TN__POOL_LINE_AT(f, lv) ((void)(lv), f##0)
#endif

static tn_result tn__pool_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    tn_array *y = out[0];
    if (!tn_array_is_contiguous(y) || (x->dtype != TN_F16 && x->dtype != TN_F32 && x->dtype != TN_F64) || y->dtype != x->dtype)
        return tn__err(TN_ERR_INTERNAL, "Pool: a contiguous float output of the input's dtype expected");
    tn__cgeo g;
    tn__cgeo_of(&node->p, x->shape[0], x->shape[1], &g);
    const int lv = tn__vm_level_now();
    tn__pool_line_fn line = x->dtype == TN_F32 ? TN__POOL_LINE_AT(tn__pool_line_f32_, lv)
                          : x->dtype == TN_F64 ? TN__POOL_LINE_AT(tn__pool_line_f64_, lv) : NULL;
    tn__pjob J = { &g, (const char *)x->data, x->strides, (char *)y->data, tn__p_pool_mode(&node->p), g.N * g.L == 1, line };
    int64_t n = tn_array_size(y);
    if (n == 0) return TN_OK;
    static void (*const fns[3])(void *, int64_t, int64_t) = { tn__pool_f16, tn__pool_f32, tn__pool_f64 };
    int64_t W = g.out[g.nsp - 1];
    tn__parallel_for(n / W, 16384 / (g.K * W) + 1, fns[x->dtype - TN_F16], &J);
    return TN_OK;
}

/* >>pool_grad_cpu -------------------------------------------------------------- */
/* POOL_GRAD(x, y, gy): the gradient of y = POOL(x) for the upstream gradient
   gy, in one pass. Each image element sums, over the window positions in
   order (as COL2IM sums its columns), what each window that reads it gives
   back: max, gy where the element equals the window's max (ties share it; a
   NaN equals nothing); average, gy / K (padding counted) or gy / the window's
   in-image count, divided in the dtype. The sums are COL2IM's (float for
   float16 and float32, double for float64, from +0, window positions
   ascending), so the result has the bits of the path the gradient took
   before it had an op (IM2COL, eq and where or a division broadcast over the
   window, COL2IM), without the columns: x, y and gy read once, the image
   written once. float32 and float64 by image planes (zeroed, then each
   window position's outputs added in, positions in order: every element sees
   its additions in the gather's order); float16 by elements. */
typedef struct tn__pgjob {
    const tn__cgeo *g;
    const char *x, *y, *gy;
    const int64_t *xs, *ys, *gs;     /* byte strides */
    char *out;                       /* contiguous (N, C, in...) */
    int mode;
    bool covers;                     /* the windows (never sharing an element) cover the image */
} tn__pgjob;

/* The window positions along dim d that output o reads inside the image. */
static inline int64_t tn__pool_count1(const tn__cgeo *g, int d, int64_t o) {
    int64_t c = 0, i = o * g->s[d] - g->plo[d];
    for (int64_t kd = 0; kd < g->k[d]; kd++, i += g->dl[d]) c += i >= 0 && i < g->in[d];
    return c;
}

#define TN__POOLG_PLANES(SUF, T) \
static void tn__pool_grad_planes_##SUF(void *ctx, int64_t lo, int64_t hi) { \
    const tn__pgjob *J = (const tn__pgjob *)ctx; \
    const tn__cgeo *g = J->g; \
    const int e = g->nsp - 1; \
    const bool mx = J->mode == TN__POOL_MAX, excl = J->mode == TN__POOL_AVG_EXCL; \
    const int64_t W = g->out[e], Q = W ? g->L / W : 0, se = g->s[e], xe = J->xs[2 + e], ye = J->ys[2 + e], ge = J->gs[2 + e]; \
    int64_t S = 1, ist[3]; \
    for (int d = e; d >= 0; d--) { ist[d] = S; S *= g->in[d]; } \
    for (int64_t p = lo; p < hi; p++) { \
        int64_t n = p / g->C, c = p % g->C, kd[3] = { 0, 0, 0 }; \
        T *TN__RESTRICT o = (T *)(void *)J->out + p * S; \
        const char *xb = J->x + n * J->xs[0] + c * J->xs[1], *yb = J->y + n * J->ys[0] + c * J->ys[1]; \
        const char *gb = J->gy + n * J->gs[0] + c * J->gs[1]; \
        for (int64_t i = 0; i < S; i++) o[i] = 0; \
        for (int64_t kidx = 0; kidx < g->K; kidx++) { \
            int64_t b = kd[e] * g->dl[e] - g->plo[e]; \
            int64_t olo = b >= 0 ? 0 : (-b + se - 1) / se, ohi = g->in[e] - b <= 0 ? 0 : (g->in[e] - b + se - 1) / se; \
            if (olo > W) olo = W; \
            if (ohi > W) ohi = W; \
            int64_t oc[3] = { 0, 0, 0 };                     /* q's output index along the dims before the last */ \
            for (int64_t q = 0; q < Q && olo < ohi; q++) { \
                int64_t off = b, xo = b * xe, yo = 0, go = 0, cb = 1; \
                bool inside = true; \
                for (int d = e - 1; d >= 0; d--) { \
                    int64_t i = oc[d] * g->s[d] - g->plo[d] + kd[d] * g->dl[d]; \
                    inside = inside && i >= 0 && i < g->in[d]; \
                    off += i * ist[d]; xo += i * J->xs[2 + d]; yo += oc[d] * J->ys[2 + d]; go += oc[d] * J->gs[2 + d]; \
                    if (excl) cb *= tn__pool_count1(g, d, oc[d]); \
                } \
                for (int d = e - 1; d >= 0 && ++oc[d] == g->out[d]; d--) oc[d] = 0;   /* the next q, without a division */ \
                if (!inside) continue; \
                const char *xr = xb + xo, *yr = yb + yo, *gr = gb + go; \
                if (mx)   /* without a branch: a +0 added changes nothing (a sum from +0 is never -0) */ \
                    for (int64_t w = olo; w < ohi; w++) { \
                        T xv = *(const T *)(const void *)(xr + w * se * xe), yv = *(const T *)(const void *)(yr + w * ye); \
                        T gv = *(const T *)(const void *)(gr + w * ge); \
                        o[off + w * se] += xv == yv ? gv : (T)0; \
                    } \
                else \
                    for (int64_t w = olo; w < ohi; w++) { \
                        T cnt = (T)(excl ? cb * tn__pool_count1(g, e, w) : g->K); \
                        o[off + w * se] += *(const T *)(const void *)(gr + w * ge) / cnt; \
                    } \
            } \
            for (int d = e; d >= 0; d--) { if (++kd[d] < g->k[d]) break; kd[d] = 0; } \
        } \
    } \
}
TN__POOLG_PLANES(f32, float)
TN__POOLG_PLANES(f64, double)

/* float16 by elements: the window positions that read each element found as COL2IM's gather finds them. */
static void tn__pool_grad_f16(void *ctx, int64_t lo, int64_t hi) {
    const tn__pgjob *J = (const tn__pgjob *)ctx;
    const tn__cgeo *g = J->g;
    const bool mx = J->mode == TN__POOL_MAX, excl = J->mode == TN__POOL_AVG_EXCL;
    const float kh = tn__ew_h2f(tn__ew_f2h((float)g->K));
    int64_t S = 1;
    for (int d = 0; d < g->nsp; d++) S *= g->in[d];
    for (int64_t t = lo; t < hi; t++) {
        int64_t sp = t % S, c = (t / S) % g->C, n = t / S / g->C, id[3], rem = sp, xo = n * J->xs[0] + c * J->xs[1];
        for (int d = g->nsp - 1; d >= 0; d--) { id[d] = rem % g->in[d]; rem /= g->in[d]; xo += id[d] * J->xs[2 + d]; }
        const float xv = tn__ew_h2f(*(const uint16_t *)(const void *)(J->x + xo));
        float acc = 0;
        int64_t kd[3] = { 0, 0, 0 };    /* the window position of kidx, counted */
        for (int64_t kidx = 0; kidx < g->K; kidx++) {
            int64_t yo = n * J->ys[0] + c * J->ys[1], go = n * J->gs[0] + c * J->gs[1], cnt = 1;
            bool ok = true;
            for (int d = g->nsp - 1; d >= 0 && ok; d--) {
                int64_t num = id[d] + g->plo[d] - kd[d] * g->dl[d], q = g->s[d] == 1 ? num : num / g->s[d];
                if (num < 0 || q * g->s[d] != num || q >= g->out[d]) ok = false;
                else { yo += q * J->ys[2 + d]; go += q * J->gs[2 + d]; if (excl) cnt *= tn__pool_count1(g, d, q); }
            }
            for (int d = g->nsp - 1; d >= 0; d--) { if (++kd[d] < g->k[d]) break; kd[d] = 0; }
            if (!ok) continue;
            float gv = tn__ew_h2f(*(const uint16_t *)(const void *)(J->gy + go));
            if (mx) { if (xv == tn__ew_h2f(*(const uint16_t *)(const void *)(J->y + yo))) acc += gv; }
            else acc += tn__ew_h2f(tn__ew_f2h(gv / (excl ? tn__ew_h2f(tn__ew_f2h((float)cnt)) : kh)));
        }
        ((uint16_t *)(void *)J->out)[t] = tn__ew_f2h(acc);
    }
}

/* Windows that never share an element (each element's sum has one term at
   most): each element is written once, 0 + its window's share (what the sum
   from +0 leaves), line by line of the image: for each image line a window
   row reads, the windows along it, each reading its y and gy once; the plane
   zeroed first where some element is in no window. */
/* Whether no two windows share an image element (*covers: and every element
   is in one); the CPU's choice of kernel and tensor_cuda.h's alike. */
static bool tn__pool_grad_disjoint(const tn__cgeo *g, bool *covers) {
    bool disjoint = true;
    *covers = true;
    for (int d = 0; d < g->nsp; d++) {
        disjoint = disjoint && g->s[d] >= (g->k[d] - 1) * g->dl[d] + 1;
        *covers = *covers && g->dl[d] == 1 && g->s[d] == g->k[d] && g->out[d] * g->s[d] - g->plo[d] >= g->in[d];
    }
    *covers = *covers && disjoint;
    return disjoint;
}

/* v where hit, else +0, by a mask (random data mispredicts a branch). */
static inline float tn__pg_self(int hit, float v) { uint32_t u; memcpy(&u, &v, 4); u &= 0u - (uint32_t)hit; memcpy(&v, &u, 4); return v; }
static inline double tn__pg_seld(int hit, double v) { uint64_t u; memcpy(&u, &v, 8); u &= 0u - (uint64_t)hit; memcpy(&v, &u, 8); return v; }

#define TN__POOLG_WINDOWS(SUF, T, AT, LOAD, STORE, QDIV, SEL) \
static void tn__pool_grad_win_##SUF(void *ctx, int64_t lo, int64_t hi) { \
    const tn__pgjob *J = (const tn__pgjob *)ctx; \
    const tn__cgeo *g = J->g; \
    const int e = g->nsp - 1; \
    const bool mx = J->mode == TN__POOL_MAX, excl = J->mode == TN__POOL_AVG_EXCL; \
    const int64_t W = g->out[e], Q = W ? g->L / W : 0, R = g->K / g->k[e], ke = g->k[e], se = g->s[e], de = g->dl[e], pe = g->plo[e]; \
    const int64_t ine = g->in[e], xe = J->xs[2 + e], ye = J->ys[2 + e], ge = J->gs[2 + e]; \
    int64_t S = 1, ist[3]; \
    for (int d = e; d >= 0; d--) { ist[d] = S; S *= g->in[d]; } \
    for (int64_t p = lo; p < hi; p++) { \
        int64_t n = p / g->C, c = p % g->C, oc[3] = { 0, 0, 0 }; \
        T *o = (T *)(void *)J->out + p * S; \
        const char *xb = J->x + n * J->xs[0] + c * J->xs[1], *yb = J->y + n * J->ys[0] + c * J->ys[1]; \
        const char *gb = J->gy + n * J->gs[0] + c * J->gs[1]; \
        if (!J->covers) memset(o, 0, (size_t)S * sizeof(T)); \
        for (int64_t q = 0; q < Q; q++) { \
            int64_t yo = 0, go = 0, cb = 1, kr[3] = { 0, 0, 0 }; \
            for (int d = 0; d < e; d++) { \
                yo += oc[d] * J->ys[2 + d]; go += oc[d] * J->gs[2 + d]; \
                if (excl) cb *= tn__pool_count1(g, d, oc[d]); \
            } \
            for (int64_t r = 0; r < R; r++) {        /* the image lines the window rows read */ \
                int64_t xo = 0, oo = 0; \
                bool in = true; \
                for (int d = 0; d < e; d++) { \
                    int64_t i = oc[d] * g->s[d] - g->plo[d] + kr[d] * g->dl[d]; \
                    in = in && i >= 0 && i < g->in[d]; \
                    xo += i * J->xs[2 + d]; oo += i * ist[d]; \
                } \
                for (int d = e - 1; d >= 0 && ++kr[d] == g->k[d]; d--) kr[d] = 0; \
                if (!in) continue; \
                const char *xr = xb + xo; \
                T *TN__RESTRICT orow = o + oo; \
                for (int64_t w = 0; w < W; w++) { \
                    AT gv = LOAD(*(const T *)(const void *)(gb + go + w * ge)); \
                    int64_t j0 = w * se - pe; \
                    bool whole = j0 >= 0 && j0 + (ke - 1) * de < ine;   /* the window's row inside the image */ \
                    if (!mx) {   /* each element its window's share, 0 + gy / count in the dtype */ \
                        AT share = (AT)0 + QDIV(gv, excl ? cb * tn__pool_count1(g, e, w) : g->K); \
                        for (int64_t v = 0, j = j0; v < ke; v++, j += de) \
                            if (whole || (j >= 0 && j < ine)) orow[j] = STORE(share); \
                        continue; \
                    } \
                    AT yv = LOAD(*(const T *)(const void *)(yb + yo + w * ye)); \
                    for (int64_t v = 0, j = j0; v < ke; v++, j += de) { \
                        if (!whole && (j < 0 || j >= ine)) continue; \
                        int hit = LOAD(*(const T *)(const void *)(xr + j * xe)) == yv; \
                        orow[j] = STORE((AT)0 + SEL(hit, gv));   /* without a branch; -0 becomes +0 as in the sum */ \
                    } \
                } \
            } \
            for (int d = e - 1; d >= 0 && ++oc[d] == g->out[d]; d--) oc[d] = 0; \
        } \
    } \
}
#define TN__POOLG_Q32(g, c) ((g) / (float)(c))
#define TN__POOLG_Q64(g, c) ((g) / (double)(c))
#define TN__POOLG_Q16(g, c) tn__ew_h2f(tn__ew_f2h((g) / tn__ew_h2f(tn__ew_f2h((float)(c)))))
TN__POOLG_WINDOWS(f16, uint16_t, float, tn__ew_h2f, tn__ew_f2h, TN__POOLG_Q16, tn__pg_self)
TN__POOLG_WINDOWS(f32, float, float, TN__CONV_ID, TN__CONV_ID, TN__POOLG_Q32, tn__pg_self)
TN__POOLG_WINDOWS(f64, double, double, TN__CONV_ID, TN__CONV_ID, TN__POOLG_Q64, tn__pg_seld)

static tn_result tn__pool_grad_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0], *y = in[1], *gy = in[2];
    tn_array *gx = out[0];
    if (!tn_array_is_contiguous(gx) || (x->dtype != TN_F16 && x->dtype != TN_F32 && x->dtype != TN_F64) || gx->dtype != x->dtype ||
        y->dtype != x->dtype || gy->dtype != x->dtype)
        return tn__err(TN_ERR_INTERNAL, "PoolGrad: float inputs of one dtype and a contiguous output of it expected");
    tn__cgeo g;
    tn__cgeo_of(&node->p, x->shape[0], x->shape[1], &g);
    tn__pgjob J = { &g, (const char *)x->data, (const char *)y->data, (const char *)gy->data, x->strides, y->strides, gy->strides,
                    (char *)gx->data, tn__p_pool_mode(&node->p), false };
    int64_t n = tn_array_size(gx), planes = g.N * g.C;
    if (n == 0) return TN_OK;
    if (tn__pool_grad_disjoint(&g, &J.covers)) {   /* each element in one window at most: written once */
        static void (*const win[3])(void *, int64_t, int64_t) = { tn__pool_grad_win_f16, tn__pool_grad_win_f32, tn__pool_grad_win_f64 };
        tn__parallel_for(planes, 16384 / (n / planes) + 1, win[x->dtype - TN_F16], &J);
    } else if (x->dtype == TN_F16) tn__parallel_for(n, 16384 / g.K + 1, tn__pool_grad_f16, &J);                   /* elements of K windows */
    else                                                                                                      /* planes of K passes */
        tn__parallel_for(planes, 16384 / (n / planes * g.K) + 1, x->dtype == TN_F32 ? tn__pool_grad_planes_f32 : tn__pool_grad_planes_f64, &J);
    return TN_OK;
}

/* >>conv_cuda ------------------------------------------------------------------ */
/* The same gathers as CUDA C for tensor_cuda.h's >>cuda_conv section: extern
   "C" tn_im2col(x, y, geo) and tn_col2im(cols, y, geo) over contiguous
   operands (im2col: a 3-d grid, see the kernel's comment; col2im: one
   thread per image element), geo passed by value (its layout
   is tensor_cuda.h's tn__cgeo_dev). Returns the
   length snprintf reports, or -1 for a dtype without a kernel. */
TN_API int tn__conv_cuda_source(tn_dtype t, char *buf, size_t cap) {
    static const char *const ty[3] = { "unsigned short", "float", "double" }, *const at[3] = { "float", "float", "double" };
    static const char *const ld[3] = { "tn_h2f", "", "" }, *const st[3] = { "tn_f2h", "", "" };
    if (t != TN_F16 && t != TN_F32 && t != TN_F64) return -1;
    int k = t - TN_F16;
    return snprintf(buf, cap,
        "%s"
        "struct tn_cg { long long k[3], s[3], plo[3], dl[3], in[3], out[3]; long long N, C, Cg, K, L, n; double padv; int nsp, G, small; };\n"
        "typedef %s T;\n"
        "typedef %s AT;\n"
        "/* I: int where every index of the call fits (g.small), else long long: 32-bit division is several times cheaper.\n"
        "   im2col: thread l of the output grid splits l once; grid y walks the rows (group, channel, window position:\n"
        "   the window's offset once a row), grid z the images (a stride: nothing to divide). */\n"
        "template <typename I> __device__ __forceinline__ void im2col_rows(const T *x, T *y, const tn_cg &g, I l) {\n"
        "    I od[3], rem = l, S = 1, N = (I)g.N, L = (I)g.L, K = (I)g.K, R = (I)g.Cg * K, rows = (I)g.G * R;\n"
        "    for (int d = g.nsp - 1; d >= 0; d--) { od[d] = rem %% (I)g.out[d]; rem /= (I)g.out[d]; }\n"
        "    for (int d = 0; d < g.nsp; d++) S *= (I)g.in[d];\n"
        "    const I img = (I)g.C * S;\n"
        "    const T pad = %s((AT)g.padv);\n"
        "    for (I row = (I)blockIdx.y; row < rows; row += (I)gridDim.y) {\n"
        "        I gi = row / R, r = row - gi * R, c = gi * (I)g.Cg + r / K, kidx = r %% K, off = 0, m = 1;\n"
        "        bool inside = true;\n"
        "        for (int d = g.nsp - 1; d >= 0; d--) {\n"
        "            I kd = kidx %% (I)g.k[d];\n"
        "            kidx /= (I)g.k[d];\n"
        "            I i = od[d] * (I)g.s[d] - (I)g.plo[d] + kd * (I)g.dl[d];\n"
        "            inside = inside && i >= 0 && i < (I)g.in[d];\n"
        "            off += i * m; m *= (I)g.in[d];\n"
        "        }\n"
        "        const I src = c * S + off;\n"
        "        T *dst = y + row * N * L + l;\n"
        "#pragma unroll 4\n"
        "        for (I n = (I)blockIdx.z; n < N; n += (I)gridDim.z) dst[n * L] = inside ? x[src + n * img] : pad;\n"
        "    }\n"
        "}\n"
        "template <typename I> __device__ __forceinline__ void col2im_at(const T *x, T *y, const tn_cg &g, I t) {\n"
        "    I S = 1, N = (I)g.N, L = (I)g.L, K = (I)g.K;\n"
        "    for (int d = 0; d < g.nsp; d++) S *= (I)g.in[d];\n"
        "    I sp = t %% S, c = (t / S) %% (I)g.C, n = t / S / (I)g.C, gi = c / (I)g.Cg, cr = c %% (I)g.Cg, id[3], rem = sp;\n"
        "    for (int d = g.nsp - 1; d >= 0; d--) { id[d] = rem %% (I)g.in[d]; rem /= (I)g.in[d]; }\n"
        "    const T *base = x + ((long long)(gi * (I)g.Cg + cr) * K * N + n) * L;\n"
        "    AT acc = 0;\n"
        "    I kd[3] = { 0, 0, 0 };      /* the window position of kidx, counted (no division) */\n"
        "    for (I kidx = 0; kidx < K; kidx++) {\n"
        "        I l = 0, mul = 1;\n"
        "        bool ok = true;\n"
        "        for (int d = g.nsp - 1; d >= 0 && ok; d--) {\n"
        "            I num = id[d] + (I)g.plo[d] - kd[d] * (I)g.dl[d], s = (I)g.s[d], q = s == 1 ? num : num / s;\n"
        "            if (num < 0 || q * s != num || q >= (I)g.out[d]) ok = false;\n"
        "            else { l += q * mul; mul *= (I)g.out[d]; }\n"
        "        }\n"
        "        if (ok) acc += %s(base[(long long)kidx * N * L + l]);\n"
        "        for (int d = g.nsp - 1; d >= 0; d--) { if (++kd[d] < (I)g.k[d]) break; kd[d] = 0; }\n"
        "    }\n"
        "    y[t] = %s(acc);\n"
        "}\n"
        "extern \"C\" __global__ void tn_im2col(const T *x, T *y, const tn_cg g) {\n"
        "    long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (l >= g.L) return;\n"
        "    if (g.small) im2col_rows<int>(x, y, g, (int)l); else im2col_rows<long long>(x, y, g, l);\n"
        "}\n"
        "extern \"C\" __global__ void tn_col2im(const T *x, T *y, const tn_cg g) {\n"
        "    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (t >= g.n) return;\n"
        "    if (g.small) col2im_at<int>(x, y, g, (int)t); else col2im_at<long long>(x, y, g, t);\n"
        "}\n",
        t == TN_F16 ? TN__CUDA_F16_SRC : "",
        ty[k], at[k], st[k], ld[k], st[k]);
}

/* >>pool_cuda ------------------------------------------------------------------ */
/* The pooling kernels' geometry (tensor_cuda.h's tn__pgeo_dev, byte for byte),
   shared by the pooling and its gradient's sources. */
#define TN__CUDA_PG_SRC \
    "struct tn_pg { long long k[3], s[3], plo[3], dl[3], in[3], out[3]; long long C, K, L, S, n; int nsp, mode, box, small, pairs; };\n"
/* POOL as CUDA C for tensor_cuda.h's >>cuda_pool section: extern "C"
   tn_pool(x, y, geo) over a contiguous image, one thread per output
   element, the CPU's fold (>>pool_cpu) in the same order and types, so the
   GPU gives the CPU's bits; geo by value (its layout is tensor_cuda.h's
   tn__pgeo_dev). The window is walked by counters, without divisions.
   tn_pool2w_<mode><s|l> (one entry per mode and index width, so each
   has its own path's registers), for the common windows two wide with
   stride two along the last of two spatial dims, gives each thread several
   outputs of a line and reads the image by 16-byte loads (same order of
   fold, same bits). Returns the length snprintf reports, or -1 for a dtype without a kernel. */
/* tn_pool2w_*'s outputs a thread (its launch takes one thread per this many of a line). */
static int tn__pool_2w_per_thread(tn_dtype t) { return t == TN_F64 ? 2 : 4; }

TN_API int tn__pool_cuda_source(tn_dtype t, char *buf, size_t cap) {
    static const char *const ty[3] = { "unsigned short", "float", "double" };
    static const char *const ld[3] = { "tn_h2f(h)", "h", "h" }, *const mt[3] = { "float", "float", "double" };
    static const char *const st[3] = { "tn_f2h((float)d)", "(float)d", "d" };
    static const char *const ex[3] = { "tn_f2h(tn_h2f(tn_f2h((float)s)) / tn_h2f(tn_f2h((float)c)))", "(float)s / (float)c", "s / (double)c" };
    if (t != TN_F16 && t != TN_F32 && t != TN_F64) return -1;
    int k = t - TN_F16;
    return snprintf(buf, cap,
        "%s"
        TN__CUDA_PG_SRC
        "typedef %s T;\n"
        "enum { TN_POOL_V = %d };   /* tn_pool2w_*'s outputs a thread */\n"
        "typedef %s MT;   /* max's accumulator: comparisons in float pick what double's would */\n"
        "template <typename A> __device__ __forceinline__ A tn_ld(T h) { return (A)(%s); }\n"
        "__device__ __forceinline__ T tn_st(double d) { return %s; }\n"
        "__device__ __forceinline__ T tn_excl(double s, long long c) { return %s; }\n"
        "/* s / K; by K's exact reciprocal where K is a power of two (the same rounding, no division) */\n"
        "__device__ __forceinline__ double tn_over(double s, long long K) {\n"
        "    return (K & (K - 1)) == 0 && K < (1LL << 62) ? s * __longlong_as_double((1023LL - (__ffsll(K) - 1)) << 52) : s / (double)K;\n"
        "}\n"
        "template <bool MX> struct tn_acc { typedef double t; };   /* a mean's sum */\n"
        "template <> struct tn_acc<true> { typedef MT t; };\n"
        "template <bool MX, typename A> __device__ __forceinline__ void tn_step(A &D, A v) { if (MX) { if (v > D || v != v) D = v; } else D += v; }\n"
        "template <bool MX, typename A> __device__ __forceinline__ void tn_comb(A &D, const A *P) {\n"
        "    if (MX) { for (int q = 0; q < 4; q++) tn_step<true, A>(D, P[q]); } else D += (P[0] + P[1]) + (P[2] + P[3]);\n"
        "}\n"
        "/* I: int where every index of the call fits (g.small), else long long. The window is\n"
        "   read four positions at a time (four loads in flight; a padded one reads the\n"
        "   plane's first element, unused), then folded in order. */\n"
        "template <typename I, int NSP, bool MX, typename A>\n"
        "__device__ __forceinline__ void pool_at(const T *__restrict__ x, T *__restrict__ y, const tn_pg &g, I t) {\n"
        "    I L = (I)g.L, l = t %% L, rem = l, i0[3], kd[3] = { 0, 0, 0 }, K = (I)g.K, cnt = 0;\n"
        "    const T *xb = x + (long long)(t / L) * g.S;\n"
        "#pragma unroll\n"
        "    for (int d = NSP - 1; d >= 0; d--) { I o = rem %% (I)g.out[d]; rem /= (I)g.out[d]; i0[d] = o * (I)g.s[d] - (I)g.plo[d]; }\n"
        "    const A pad = MX ? (A)-__longlong_as_double(0x7ff0000000000000LL) : (A)0;\n"
        "    A D = pad, P[4] = { pad, pad, pad, pad };\n"
        "    I lim = !g.box ? 0 : MX ? (K >= 8 ? K / 4 * 4 : 0) : K / 4 * 4;\n"
        "    for (I j0 = 0; j0 < K; j0 += 4) {\n"
        "        T raw[4];\n"
        "        bool in[4];\n"
        "#pragma unroll\n"
        "        for (int u = 0; u < 4; u++) {\n"
        "            bool ok = j0 + u < K;\n"
        "            I off = 0;\n"
        "#pragma unroll\n"
        "            for (int d = 0; d < NSP; d++) {\n"
        "                I i = i0[d] + kd[d] * (I)g.dl[d];\n"
        "                ok = ok && i >= 0 && i < (I)g.in[d];\n"
        "                off = off * (I)g.in[d] + i;\n"
        "            }\n"
        "            raw[u] = xb[ok ? off : 0];   /* unconditional: the four loads issue together */\n"
        "            in[u] = ok;\n"
        "#pragma unroll\n"
        "            for (int d = NSP - 1; d >= 0; d--) { if (++kd[d] < (I)g.k[d]) break; kd[d] = 0; }\n"
        "        }\n"
        "#pragma unroll\n"
        "        for (int u = 0; u < 4; u++) {\n"
        "            I j = j0 + u;\n"
        "            if (j >= K) break;\n"
        "            A v = in[u] ? tn_ld<A>(raw[u]) : pad;\n"
        "            cnt += in[u];\n"
        "            if (j < lim) tn_step<MX, A>(P[j & 3], v);\n"
        "            else {\n"
        "                if (j == lim && lim) tn_comb<MX, A>(D, P);\n"
        "                tn_step<MX, A>(D, v);\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "    if (lim == K && lim) tn_comb<MX, A>(D, P);\n"
        "    y[t] = g.mode == 2 ? tn_excl((double)D, (long long)cnt) : tn_st(g.mode == 1 ? tn_over((double)D, g.K) : (double)D);\n"
        "}\n"
        "template <typename I> __device__ __forceinline__ void pool_any(const T *x, T *y, const tn_pg &g, I t) {\n"
        "    bool mx = g.mode == 0;\n"
        "    switch (g.nsp) {\n"
        "    case 1: if (mx) pool_at<I, 1, true, MT>(x, y, g, t); else pool_at<I, 1, false, double>(x, y, g, t); break;\n"
        "    case 2: if (mx) pool_at<I, 2, true, MT>(x, y, g, t); else pool_at<I, 2, false, double>(x, y, g, t); break;\n"
        "    default: if (mx) pool_at<I, 3, true, MT>(x, y, g, t); else pool_at<I, 3, false, double>(x, y, g, t); break;\n"
        "    }\n"
        "}\n"
        "extern \"C\" __global__ void tn_pool(const T *x, T *y, const tn_pg g) {\n"
        "    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (t >= g.n) return;\n"
        "    if (g.small) pool_any<int>(x, y, g, (int)t); else pool_any<long long>(x, y, g, t);\n"
        "}\n"
        "/* Two spatial dims, windows two wide with stride two along the last and no dilation\n"
        "   there, not g.box (so pool_at folds each window in order): V neighbouring outputs of\n"
        "   a line a thread (g.n threads; V * sizeof(T) is 8 or 16 bytes). Each window row's 2V\n"
        "   inputs are read by 16-byte loads where they lie in the image aligned, else one by one;\n"
        "   each output folds its window in pool_at's order (an outside input is the pad, which\n"
        "   changes no fold); the V outputs stored by one access where aligned. A window block\n"
        "   inside the image skips the per-input bounds. One entry per mode and index type\n"
        "   (tn_pool2w_<mode><s: int, l: long long>), so each has only its own registers. */\n"
        "template <int B> struct tn_vec;\n"
        "template <> struct tn_vec<8> { typedef uint2 t; };\n"
        "template <> struct tn_vec<16> { typedef uint4 t; };\n"
        "template <typename I, int MODE>\n"
        "__device__ __forceinline__ void pool2w_at(const T *__restrict__ x, T *__restrict__ y, const tn_pg &g, I t) {\n"
        "    enum { V = TN_POOL_V };\n"
        "    const bool MX = MODE == 0;\n"
        "    typedef typename tn_vec<V * sizeof(T)>::t VO;\n"
        "    typedef typename tn_acc<MX>::t A;\n"
        "    const I Wo = (I)g.out[1], Wq = (Wo + V - 1) / V, line = t / Wq, ow0 = (t - line * Wq) * V, Ho = (I)g.out[0];\n"
        "    const I img = line / Ho, Hi = (I)g.in[0], Wi = (I)g.in[1], k0 = (I)g.k[0], d0 = (I)g.dl[0];\n"
        "    const I iw0 = ow0 * 2 - (I)g.plo[1], ih0 = (line - img * Ho) * (I)g.s[0] - (I)g.plo[0];\n"
        "    const T *xb = x + (long long)img * g.S;\n"
        "    const A pad = MX ? (A)-__longlong_as_double(0x7ff0000000000000LL) : (A)0;\n"
        "    A D[V];\n"
        "#pragma unroll\n"
        "    for (int v = 0; v < V; v++) D[v] = pad;\n"
        "    I cnt[V];\n"
        "    if (iw0 >= 0 && iw0 + 2 * V <= Wi && ih0 >= 0 && ih0 + (k0 - 1) * d0 < Hi) {\n"
        "        for (I r = 0; r < k0; r++) {\n"
        "            const T *xr = xb + (long long)(ih0 + r * d0) * Wi + iw0;\n"
        "            __align__(16) T seg[2 * V];\n"
        "            if (((unsigned long long)xr & 15) == 0) {\n"
        "#pragma unroll\n"
        "                for (int q = 0; q < (int)(sizeof seg / 16); q++) ((uint4 *)seg)[q] = ((const uint4 *)xr)[q];\n"
        "            } else {\n"
        "#pragma unroll\n"
        "                for (int u = 0; u < 2 * V; u++) seg[u] = xr[u];\n"
        "            }\n"
        "#pragma unroll\n"
        "            for (int u = 0; u < 2 * V; u++) tn_step<MX, A>(D[u / 2], tn_ld<A>(seg[u]));\n"
        "        }\n"
        "#pragma unroll\n"
        "        for (int v = 0; v < V; v++) cnt[v] = 2 * k0;\n"
        "    } else {\n"
        "#pragma unroll\n"
        "        for (int v = 0; v < V; v++) cnt[v] = 0;\n"
        "        for (I r = 0; r < k0; r++) {\n"
        "            const I ih = ih0 + r * d0;\n"
        "            const bool row = ih >= 0 && ih < Hi;\n"
        "            const T *xr = xb + (long long)(row ? ih : 0) * Wi;\n"
        "#pragma unroll\n"
        "            for (int u = 0; u < 2 * V; u++) {\n"
        "                const bool in = row && iw0 + u >= 0 && iw0 + u < Wi;\n"
        "                tn_step<MX, A>(D[u / 2], in ? tn_ld<A>(xr[iw0 + u]) : pad);\n"
        "                cnt[u / 2] += in;\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "    __align__(16) T o[V];\n"
        "#pragma unroll\n"
        "    for (int v = 0; v < V; v++)\n"
        "        o[v] = MODE == 2 ? tn_excl((double)D[v], (long long)cnt[v]) : tn_st(MODE == 1 ? tn_over((double)D[v], g.K) : (double)D[v]);\n"
        "    T *yo = y + (long long)line * Wo + ow0;\n"
        "    if (ow0 + V <= Wo && (unsigned long long)yo %% sizeof(VO) == 0) *(VO *)yo = *(const VO *)o;\n"
        "    else for (int v = 0; v < V && ow0 + v < Wo; v++) yo[v] = o[v];\n"
        "}\n"
        "#define TN_POOL2W(M, S, I) extern \"C\" __global__ void tn_pool2w_##M##S(const T *x, T *y, const tn_pg g) { \\\n"
        "    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; \\\n"
        "    if (t < g.n) pool2w_at<I, M>(x, y, g, (I)t); \\\n"
        "}\n"
        "TN_POOL2W(0, s, int) TN_POOL2W(0, l, long long) TN_POOL2W(1, s, int) TN_POOL2W(1, l, long long)\n"
        "TN_POOL2W(2, s, int) TN_POOL2W(2, l, long long)\n",
        t == TN_F16 ? TN__CUDA_F16_SRC : "",
        ty[k], tn__pool_2w_per_thread(t), mt[k], ld[k], st[k], ex[k]);
}

/* >>pool_grad_cuda ---------------------------------------------------------------- */
/* POOL_GRAD as CUDA C for tensor_cuda.h's >>cuda_pool section: extern "C"
   tn_pool_grad(x, y, gy, gx, geo) over contiguous operands, one thread per
   image element, the CPU's sums (>>pool_grad_cpu: window positions in
   order, the same accumulator, the division in the dtype), so the GPU gives
   the CPU's bits; geo is POOL's (tn_pg, tensor_cuda.h's tn__pgeo_dev).
   tn_pool_grad_w, for windows that never share an element (each element's
   sum has one term at most), takes a thread a window instead: y and gy read
   once a window, the window's elements read and written side by side (the
   walk compiled per spatial rank; a two-wide window row by one access where
   the run says sizes and pointers allow it, g.pairs).
   Returns the length snprintf reports, or -1 for a dtype without a kernel. */
TN_API int tn__pool_grad_cuda_source(tn_dtype t, char *buf, size_t cap) {
    static const char *const ty[3] = { "unsigned short", "float", "double" }, *const at[3] = { "float", "float", "double" };
    static const char *const ld[3] = { "tn_h2f(h)", "h", "h" };
    static const char *const dv[3] = { "tn_h2f(tn_f2h(tn_h2f(g) / tn_h2f(tn_f2h((float)c))))", "g / (float)c", "g / (double)c" };
    if (t != TN_F16 && t != TN_F32 && t != TN_F64) return -1;
    int k = t - TN_F16;
    return snprintf(buf, cap,
        "%s"
        TN__CUDA_PG_SRC
        "typedef %s T;\n"
        "typedef %s AT;\n"
        "__device__ __forceinline__ AT tn_ld(T h) { return (AT)(%s); }\n"
        "__device__ __forceinline__ AT tn_q(T g, long long c) { return %s; }   /* g / c in the dtype */\n"
        "__device__ __forceinline__ T tn_st(AT a) { return %s; }\n"
        "template <typename I> __device__ __forceinline__ I tn_count1(const tn_pg &g, int d, I o) {\n"
        "    I c = 0, i = o * (I)g.s[d] - (I)g.plo[d];\n"
        "    for (I kd = 0; kd < (I)g.k[d]; kd++, i += (I)g.dl[d]) c += i >= 0 && i < (I)g.in[d];\n"
        "    return c;\n"
        "}\n"
        "/* I: int where every index of the call fits (g.small), else long long. */\n"
        "template <typename I> __device__ __forceinline__ void pool_grad_at(const T *x, const T *y, const T *gy, T *gx, const tn_pg &g, I t) {\n"
        "    const I S = (I)g.S, L = (I)g.L, K = (I)g.K, plane = t / S;\n"
        "    I id[3], rem = t - plane * S;\n"
        "    for (int d = g.nsp - 1; d >= 0; d--) { id[d] = rem %% (I)g.in[d]; rem /= (I)g.in[d]; }\n"
        "    const T *yb = y + (long long)plane * L, *gb = gy + (long long)plane * L;\n"
        "    const AT xv = tn_ld(x[t]);\n"
        "    AT acc = 0;\n"
        "    I kd[3] = { 0, 0, 0 };      /* the window position of kidx, counted (no division) */\n"
        "    for (I kidx = 0; kidx < K; kidx++) {\n"
        "        I l = 0, mul = 1, cnt = 1;\n"
        "        bool ok = true;\n"
        "        for (int d = g.nsp - 1; d >= 0 && ok; d--) {\n"
        "            I num = id[d] + (I)g.plo[d] - kd[d] * (I)g.dl[d], s = (I)g.s[d], q = s == 1 ? num : num / s;\n"
        "            if (num < 0 || q * s != num || q >= (I)g.out[d]) ok = false;\n"
        "            else { l += q * mul; mul *= (I)g.out[d]; if (g.mode == 2) cnt *= tn_count1<I>(g, d, q); }\n"
        "        }\n"
        "        for (int d = g.nsp - 1; d >= 0; d--) { if (++kd[d] < (I)g.k[d]) break; kd[d] = 0; }\n"
        "        if (!ok) continue;\n"
        "        if (g.mode == 0) { if (xv == tn_ld(yb[l])) acc += tn_ld(gb[l]); }\n"
        "        else acc += tn_q(gb[l], g.mode == 2 ? (long long)cnt : g.K);\n"
        "    }\n"
        "    gx[t] = tn_st(acc);\n"
        "}\n"
        "/* Windows that never share an element: a thread a window (t over N*C*L), its in-image elements\n"
        "   written as the sums from +0 leave them (0 + its share); elements in no window are zeroed first.\n"
        "   NSP spatial dims; the window's rows along the last dim: two elements by one 2-wide access where\n"
        "   g.pairs (two wide, no dilation, even sizes and aligned pointers) and the pair lies in the image. */\n"
        "struct __align__(2 * sizeof(T)) tn_t2 { T a, b; };\n"
        "__device__ __forceinline__ T tn_one(bool mx, T xv, AT yv, AT q) { AT v = 0; if (!mx || tn_ld(xv) == yv) v = v + q; return tn_st(v); }\n"
        "template <typename I, int NSP> __device__ __forceinline__ void pool_grad_w_at(const T *x, const T *y, const T *gy, T *gx, const tn_pg &g, I t) {\n"
        "    const I L = (I)g.L, plane = t / L;\n"
        "    I rem = t - plane * L, od[3], cnt = 1, kd[3] = { 0, 0, 0 }, i0[3], st[3], m = 1;\n"
        "#pragma unroll\n"
        "    for (int d = NSP - 1; d > 0; d--) { od[d] = rem %% (I)g.out[d]; rem /= (I)g.out[d]; }\n"
        "    od[0] = rem;\n"
        "    if (g.mode == 2)\n"
        "#pragma unroll\n"
        "        for (int d = 0; d < NSP; d++) cnt *= tn_count1<I>(g, d, od[d]);\n"
        "    const bool mx = g.mode == 0;\n"
        "    const AT yv = mx ? tn_ld(y[t]) : (AT)0, q = mx ? tn_ld(gy[t]) : tn_q(gy[t], g.mode == 2 ? (long long)cnt : g.K);\n"
        "#pragma unroll\n"
        "    for (int d = NSP - 1; d >= 0; d--) { i0[d] = od[d] * (I)g.s[d] - (I)g.plo[d]; st[d] = m; m *= (I)g.in[d]; }\n"
        "    const I ke = (I)g.k[NSP - 1], de = (I)g.dl[NSP - 1], ie = (I)g.in[NSP - 1], je = i0[NSP - 1];\n"
        "    const bool pair = g.pairs && je >= 0 && je + 1 < ie;\n"
        "    const T *xb = x + (long long)plane * g.S;\n"
        "    T *ob = gx + (long long)plane * g.S;\n"
        "    for (I r = 0; r < (I)g.K / ke; r++) {   /* the window's rows */\n"
        "        I off = je;\n"
        "        bool in = true;\n"
        "#pragma unroll\n"
        "        for (int d = 0; d < NSP - 1; d++) { I i = i0[d] + kd[d] * (I)g.dl[d]; in = in && i >= 0 && i < (I)g.in[d]; off += i * st[d]; }\n"
        "#pragma unroll\n"
        "        for (int d = NSP - 2; d >= 0; d--) { if (++kd[d] < (I)g.k[d]) break; kd[d] = 0; }\n"
        "        if (!in) continue;\n"
        "        if (pair) {\n"
        "            const tn_t2 xv = *(const tn_t2 *)(xb + off);\n"
        "            tn_t2 o;\n"
        "            o.a = tn_one(mx, xv.a, yv, q);\n"
        "            o.b = tn_one(mx, xv.b, yv, q);\n"
        "            *(tn_t2 *)(ob + off) = o;\n"
        "            continue;\n"
        "        }\n"
        "        for (I v = 0, j = je; v < ke; v++, j += de)\n"
        "            if (j >= 0 && j < ie) ob[off - je + j] = tn_one(mx, xb[off - je + j], yv, q);\n"
        "    }\n"
        "}\n"
        "template <typename I> __device__ __forceinline__ void pool_grad_w_any(const T *x, const T *y, const T *gy, T *gx, const tn_pg &g, I t) {\n"
        "    switch (g.nsp) {\n"
        "    case 1: pool_grad_w_at<I, 1>(x, y, gy, gx, g, t); break;\n"
        "    case 2: pool_grad_w_at<I, 2>(x, y, gy, gx, g, t); break;\n"
        "    default: pool_grad_w_at<I, 3>(x, y, gy, gx, g, t); break;\n"
        "    }\n"
        "}\n"
        "extern \"C\" __global__ void tn_pool_grad(const T *x, const T *y, const T *gy, T *gx, const tn_pg g) {\n"
        "    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (t >= g.n) return;\n"
        "    if (g.small) pool_grad_at<int>(x, y, gy, gx, g, (int)t); else pool_grad_at<long long>(x, y, gy, gx, g, t);\n"
        "}\n"
        "extern \"C\" __global__ void tn_pool_grad_w(const T *x, const T *y, const T *gy, T *gx, const tn_pg g) {\n"
        "    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (t >= g.n) return;\n"
        "    if (g.small) pool_grad_w_any<int>(x, y, gy, gx, g, (int)t); else pool_grad_w_any<long long>(x, y, gy, gx, g, t);\n"
        "}\n",
        t == TN_F16 ? TN__CUDA_F16_SRC : "",
        ty[k], at[k], ld[k], dv[k], t == TN_F16 ? "tn_f2h(a)" : "(T)a");
}

/* >>conv_infer_label ----------------------------------------------------------- */
static tn_result tn__conv_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const char *who = tn__op_def(node->op)->name;
    char sb[128];
    int nsp = tn__p_conv_nsp(&node->p), G = tn__p_conv_groups(&node->p);
    if (in[0].dtype != TN_F16 && in[0].dtype != TN_F32 && in[0].dtype != TN_F64)
        return tn__err(TN_ERR_DTYPE, "%s: a float input expected, not %s", who, tn_dtype_name(in[0].dtype));
    tn__cgeo g;
    memset(out, 0, sizeof *out);
    out->dtype = in[0].dtype;
    if (node->op == TN_OP_IM2COL) {
        if (in[0].ndim != nsp + 2 || in[0].shape[1] < 0 || G <= 0 || in[0].shape[1] % G != 0)
            return tn__err(TN_ERR_SHAPE, "%s: an (N, C, %d spatial dims) input with C static and divisible by %d groups expected, not %s",
                           who, nsp, G, tn__shape_str(in[0].ndim, in[0].shape, sb));
        tn__cgeo_of(&node->p, in[0].shape[0], in[0].shape[1], &g);
        for (int d = 0; d < nsp; d++)
            if (in[0].shape[2 + d] != g.in[d] || g.out[d] < 1)
                return tn__err(TN_ERR_SHAPE, "%s: input %s does not fit the window (spatial dim %d: size %lld, kernel %lld, dilation %lld, padding %lld+%lld)",
                               who, tn__shape_str(in[0].ndim, in[0].shape, sb), d, (long long)in[0].shape[2 + d], (long long)g.k[d],
                               (long long)g.dl[d], (long long)g.plo[d], (long long)g.phi[d]);
        out->ndim = 4;
        out->shape[0] = G; out->shape[1] = g.Cg * g.K; out->shape[2] = in[0].shape[0]; out->shape[3] = g.L;
        out->bcast[2] = in[0].bcast[0];
        return TN_OK;
    }
    tn__cgeo_of(&node->p, in[0].shape[2], 0, &g);
    if (in[0].ndim != 4 || in[0].shape[0] != G || in[0].shape[1] < 0 || in[0].shape[1] % g.K != 0 || in[0].shape[3] != g.L)
        return tn__err(TN_ERR_SHAPE, "%s: columns (%d, C/groups*%lld, N, %lld) expected, not %s", who, G, (long long)g.K, (long long)g.L,
                       tn__shape_str(in[0].ndim, in[0].shape, sb));
    out->ndim = nsp + 2;
    out->shape[0] = in[0].shape[2];
    out->shape[1] = G * (in[0].shape[1] / g.K);
    for (int d = 0; d < nsp; d++) out->shape[2 + d] = g.in[d];
    out->bcast[0] = in[0].bcast[2];
    return TN_OK;
}

/* Im2Col{kernel=(3, 3), stride=(1, 1), pad=(1, 1), dilation=(1, 1), groups=1} */
static void tn__conv_label(const tn_var *node, char *buf, size_t cap) {
    const tn_params *p = &node->p;
    int nsp = tn__p_conv_nsp(p);
    static const char *const what[5] = { "kernel", "stride", "pad", "pad_after", "dilation" };
    size_t n = (size_t)snprintf(buf, cap, "%s{", node->op == TN_OP_IM2COL ? "Im2Col" : "Col2Im");
    for (int w = 0; w < 5 && n < cap; w++) {
        n += (size_t)snprintf(buf + n, cap - n, "%s=(", what[w]);
        for (int d = 0; d < nsp && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)tn__p_conv_at(p, w, d));
        if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "), ");
    }
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "groups=%d", tn__p_conv_groups(p));
    if (n < cap && tn__p_conv_padv(p) != 0) n += (size_t)snprintf(buf + n, cap - n, ", pad_value=%g", tn__p_conv_padv(p));
    if (n < cap) snprintf(buf + n, cap - n, "}");
}

/* >>conv_grad ------------------------------------------------------------------ */
/* Each is the other's transpose: the same params. (Padding by -inf only
   feeds max pooling, whose gradient never reaches a padded position.) */
static tn_result tn__conv_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_params p = node->p;
    p.f[0] = 0;
    gin[0] = tn__node(node->graph, node->op == TN_OP_IM2COL ? TN_OP_COL2IM : TN_OP_IM2COL, 1, &g, &p, NULL, "tn_grad");
    return gin[0] ? TN_OK : tn__gfail(tn__op_def(node->op)->name, node);
}

/* >>conv_constructors ------------------------------------------------------------ */
/* The window geometry of o for x (spatial rank nsp, static sizes), kernel k. */
static tn_result tn__conv_geometry(const char *who, tn_var *x, const int64_t *k, const tn_conv_opts *o, bool pool, int64_t v[6][3]) {
    int nsp = x->type.ndim - 2;
    char sb[128];
    for (int d = 0; d < nsp; d++) {
        int st = o->stride[d] ? o->stride[d] : pool ? (int)k[d] : 1, dl = o->dilation[d] ? o->dilation[d] : 1;
        if (st < 1 || dl < 1 || k[d] < 1 || o->padding[d] < 0)
            return tn__err(TN_ERR_INVALID, "%s: spatial dim %d: stride %d, dilation %d, kernel %lld and padding %d must be positive (padding >= 0)",
                           who, d, st, dl, (long long)k[d], o->padding[d]);
        int64_t plo = o->padding[d], phi = o->padding[d], span = (int64_t)dl * (k[d] - 1);
        if (o->pad_mode == TN_PAD_VALID) plo = phi = 0;
        else if (o->pad_mode == TN_PAD_SAME) {
            if (st != 1) return tn__err(TN_ERR_INVALID, "%s: padding 'same' needs stride 1 (spatial dim %d has %d), as PyTorch", who, d, st);
            plo = span / 2; phi = span - plo;
        } else if (o->pad_mode != TN_PAD_EXPLICIT) return tn__err(TN_ERR_INVALID, "%s: pad_mode %d is not a TN_PAD_* value", who, o->pad_mode);
        if (pool && 2 * plo > k[d])
            return tn__err(TN_ERR_INVALID, "%s: padding %lld is more than half the kernel %lld (spatial dim %d), as PyTorch refuses", who,
                           (long long)plo, (long long)k[d], d);
        if (x->type.shape[2 + d] < 0)
            return tn__err(TN_ERR_SHAPE, "%s: x's spatial sizes must be static, %s has dim %d unknown", who,
                           tn__shape_str(x->type.ndim, x->type.shape, sb), 2 + d);
        v[TN__CONV_K][d] = k[d]; v[TN__CONV_S][d] = st; v[TN__CONV_PLO][d] = plo; v[TN__CONV_PHI][d] = phi;
        v[TN__CONV_DL][d] = dl; v[TN__CONV_IN][d] = x->type.shape[2 + d];
    }
    return TN_OK;
}

static tn_result tn__conv_check(const char *who, tn_var *x, int want_nsp, bool need_float) {
    char sb[128];
    if (!x) return TN_ERR_NULL;
    int nsp = x->type.ndim - 2;
    if (nsp < 1 || nsp > 3 || (want_nsp && nsp != want_nsp))
        return tn__err(TN_ERR_SHAPE, "%s: x must be (N, C, %s spatial dims), not %s", who, want_nsp == 1 ? "1" : want_nsp == 2 ? "2" : want_nsp == 3 ? "3" : "1 to 3",
                       tn__shape_str(x->type.ndim, x->type.shape, sb));
    if (need_float && !tn_dtype_is_float(x->type.dtype))
        return tn__err(TN_ERR_DTYPE, "%s: x is %s; convolutions and pooling take float16, float32 or float64", who, tn_dtype_name(x->type.dtype));
    if (x->type.shape[1] < 0) return tn__err(TN_ERR_SHAPE, "%s: x's channel count (dim 1 of %s) must be static", who, tn__shape_str(x->type.ndim, x->type.shape, sb));
    return TN_OK;
}

static tn_var *tn__im2col(const char *who, tn_var *x, int nsp, int groups, int64_t v[6][3], double padv) {
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_conv(&p, nsp, groups, (const int64_t (*)[3])v, padv);
    return tn__node(x->graph, TN_OP_IM2COL, 1, &x, &p, NULL, who);
}

/* y (G, per, N, L) as (N, G*per, out...), N possibly unknown. */
static tn_var *tn__conv_unflatten(tn_var *y, int64_t C, int nsp, const tn__cgeo *g) {
    int64_t sh[5] = { C, -1, 1, 1, 1 };
    for (int d = 0; d < nsp; d++) sh[2 + d] = g->out[d];
    int perm[5] = { 1, 0, 2, 3, 4 };
    return tn_dimshuffle(tn_reshape(y, nsp + 2, sh), nsp + 2, perm);
}

static tn_var *tn__conv_make(const char *who, tn_var *x, tn_var *w, const tn_conv_opts *o, int want_nsp) {
    static const tn_conv_opts zero = { .pad_mode = TN_PAD_EXPLICIT };   /* every option its default */
    char s1[128], s2[128];
    if (!x || !w) { tn__err_null(who, !x ? "x" : "w"); return NULL; }
    if (!o) o = &zero;
    if (tn__conv_check(who, x, want_nsp, true) != TN_OK) return NULL;
    int nsp = x->type.ndim - 2, G = o->groups ? o->groups : 1;
    int64_t C = x->type.shape[1], Co = w->type.shape[0];
    bool wok = w->type.ndim == nsp + 2 && Co > 0 && G > 0 && Co % G == 0 && C % G == 0 && w->type.shape[1] == C / G;
    for (int d = 0; wok && d < nsp; d++) wok = w->type.shape[2 + d] > 0;
    if (!wok) {
        tn__err(TN_ERR_SHAPE, "%s: w must be (C_out, C/groups, kernel...) with static sizes and C_out divisible by groups: x %s, w %s, groups %d%s",
                who, tn__shape_str(x->type.ndim, x->type.shape, s1), tn__shape_str(w->type.ndim, w->type.shape, s2), G,
                w->op == TN_OP_SHARED ? " (a shared variable's shape is static with tn_shared_fixed)" : "");
        return NULL;
    }
    if (w->type.dtype != x->type.dtype) {
        tn__err(TN_ERR_DTYPE, "%s: x is %s but w is %s", who, tn_dtype_name(x->type.dtype), tn_dtype_name(w->type.dtype));
        return NULL;
    }
    int64_t v[6][3] = { { 0 } };
    if (tn__conv_geometry(who, x, w->type.shape + 2, o, false, v) != TN_OK) return NULL;
    tn_var *cols = tn__im2col(who, x, nsp, G, v, 0.0);
    if (!cols) return NULL;
    tn__cgeo g;
    tn__cgeo_of(&cols->p, -1, C, &g);
    tn_var *wr = tn_reshape(w, TN_SHAPE(G, Co / G, g.Cg * g.K));
    tn_var *prod = tn_dot(wr, tn_reshape(cols, TN_SHAPE(G, g.Cg * g.K, -1)));   /* (G, Co/G, N*L) */
    return tn__conv_unflatten(prod, Co, nsp, &g);
}

TN_API tn_var *tn_conv(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn__conv_make("tn_conv", x, w, o, 0); }
TN_API tn_var *tn_conv1d(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn__conv_make("tn_conv1d", x, w, o, 1); }
TN_API tn_var *tn_conv2d(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn__conv_make("tn_conv2d", x, w, o, 2); }
TN_API tn_var *tn_conv3d(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn__conv_make("tn_conv3d", x, w, o, 3); }

static tn_var *tn__conv_transpose_make(const char *who, tn_var *x, tn_var *w, const tn_conv_opts *o, int want_nsp) {
    static const tn_conv_opts zero = { .pad_mode = TN_PAD_EXPLICIT };   /* every option its default */
    char s1[128], s2[128];
    if (!x || !w) { tn__err_null(who, !x ? "x" : "w"); return NULL; }
    if (!o) o = &zero;
    if (tn__conv_check(who, x, want_nsp, true) != TN_OK) return NULL;
    int nsp = x->type.ndim - 2, G = o->groups ? o->groups : 1;
    int64_t Ci = x->type.shape[1], Cog = w->type.shape[1];
    bool wok = w->type.ndim == nsp + 2 && w->type.shape[0] == Ci && Cog > 0 && G > 0 && Ci % G == 0;
    for (int d = 0; wok && d < nsp; d++) wok = w->type.shape[2 + d] > 0 && x->type.shape[2 + d] >= 1;
    if (!wok) {
        tn__err(TN_ERR_SHAPE, "%s: w must be (C_in, C_out/groups, kernel...) with static sizes, C_in divisible by groups: x %s, w %s, groups %d",
                who, tn__shape_str(x->type.ndim, x->type.shape, s1), tn__shape_str(w->type.ndim, w->type.shape, s2), G);
        return NULL;
    }
    if (w->type.dtype != x->type.dtype) {
        tn__err(TN_ERR_DTYPE, "%s: x is %s but w is %s", who, tn_dtype_name(x->type.dtype), tn_dtype_name(w->type.dtype));
        return NULL;
    }
    if (o->pad_mode != TN_PAD_EXPLICIT) { tn__err(TN_ERR_INVALID, "%s: takes explicit padding only (pad_mode %d)", who, o->pad_mode); return NULL; }
    /* the image this is the input gradient of: size (in-1)*s - 2p + dl*(k-1) + output_padding + 1
       (a conv over it, padded p on both sides, has x's size: output_padding < s is floored away) */
    int64_t v[6][3] = { { 0 } };
    for (int d = 0; d < nsp; d++) {
        int st = o->stride[d] ? o->stride[d] : 1, dl = o->dilation[d] ? o->dilation[d] : 1, op = o->output_padding[d];
        if (st < 1 || dl < 1 || o->padding[d] < 0 || op < 0 || (op >= st && op >= dl)) {
            tn__err(TN_ERR_INVALID, "%s: spatial dim %d: stride %d, dilation %d, padding %d, output_padding %d (output_padding must be smaller "
                    "than the stride or the dilation)", who, d, st, dl, o->padding[d], op);
            return NULL;
        }
        int64_t k = w->type.shape[2 + d], size = (x->type.shape[2 + d] - 1) * st - 2 * (int64_t)o->padding[d] + dl * (k - 1) + op + 1;
        if (size < 1) { tn__err(TN_ERR_SHAPE, "%s: spatial dim %d of the result would be %lld", who, d, (long long)size); return NULL; }
        v[TN__CONV_K][d] = k; v[TN__CONV_S][d] = st; v[TN__CONV_PLO][d] = o->padding[d]; v[TN__CONV_PHI][d] = o->padding[d];
        v[TN__CONV_DL][d] = dl; v[TN__CONV_IN][d] = size;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_conv(&p, nsp, G, (const int64_t (*)[3])v, 0.0);
    tn__cgeo g;
    tn__cgeo_of(&p, -1, Cog * G, &g);
    /* (N, Ci, S) -> (G, Ci/G, N*L); w (Ci, Cog, k) -> (G, Ci/G, Cog*K) -> per group its transpose */
    static const int group_first[4] = { 1, 2, 0, 3 }, transposed[3] = { 0, 2, 1 };
    tn_var *xr = tn_dimshuffle(tn_reshape(x, TN_SHAPE(-1, G, Ci / G, g.L)), 4, group_first);
    xr = tn_reshape(xr, TN_SHAPE(G, Ci / G, -1));
    tn_var *wr = tn_dimshuffle(tn_reshape(w, TN_SHAPE(G, Ci / G, Cog * g.K)), 3, transposed);
    tn_var *cols = tn_reshape(tn_dot(wr, xr), TN_SHAPE(G, Cog * g.K, -1, g.L));     /* (G, Cog*K, N, L) */
    return cols ? tn__node(x->graph, TN_OP_COL2IM, 1, &cols, &p, NULL, who) : NULL;
}

TN_API tn_var *tn_conv_transpose(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn__conv_transpose_make("tn_conv_transpose", x, w, o, 0); }
TN_API tn_var *tn_conv2d_transpose(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn__conv_transpose_make("tn_conv2d_transpose", x, w, o, 2); }

/* >>pool_infer_label_grad ------------------------------------------------------ */
static tn_result tn__pool_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const char *who = tn__op_def(node->op)->name;
    char sb[128];
    int nsp = tn__p_conv_nsp(&node->p);
    if (in[0].dtype != TN_F16 && in[0].dtype != TN_F32 && in[0].dtype != TN_F64)
        return tn__err(TN_ERR_DTYPE, "%s: a float input expected, not %s", who, tn_dtype_name(in[0].dtype));
    if (in[0].ndim != nsp + 2 || in[0].shape[1] < 0)
        return tn__err(TN_ERR_SHAPE, "%s: an (N, C, %d spatial dims) input with C static expected, not %s", who, nsp,
                       tn__shape_str(in[0].ndim, in[0].shape, sb));
    tn__cgeo g;
    tn__cgeo_of(&node->p, in[0].shape[0], in[0].shape[1], &g);
    *out = in[0];
    for (int d = 0; d < nsp; d++) {
        if (in[0].shape[2 + d] != g.in[d] || g.out[d] < 1)
            return tn__err(TN_ERR_SHAPE, "%s: input %s does not fit the window (spatial dim %d: size %lld, kernel %lld, dilation %lld, padding %lld+%lld)",
                           who, tn__shape_str(in[0].ndim, in[0].shape, sb), d, (long long)in[0].shape[2 + d], (long long)g.k[d],
                           (long long)g.dl[d], (long long)g.plo[d], (long long)g.phi[d]);
        out->shape[2 + d] = g.out[d];
        out->bcast[2 + d] = g.out[d] == 1 && in[0].bcast[2 + d];
    }
    out->bcast[1] = in[0].bcast[1];
    return TN_OK;
}

/* POOL_GRAD: x as POOL's input; y and gy of POOL's output type (dims known on both sides equal); out: x's type. */
static tn_result tn__pool_grad_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    char sb[128], sy[128];
    tn_type yt;
    tn_result r = tn__pool_infer(node, in, &yt);
    if (r != TN_OK) return r;
    for (int k = 1; k < 3; k++) {
        bool fits = in[k].dtype == in[0].dtype && in[k].ndim == yt.ndim;
        for (int d = 0; fits && d < yt.ndim; d++) fits = in[k].shape[d] < 0 || yt.shape[d] < 0 || in[k].shape[d] == yt.shape[d];
        if (!fits)
            return tn__err(TN_ERR_SHAPE, "PoolGrad: %s is %s %s; the pooling's output is %s %s", k == 1 ? "y" : "gy", tn_dtype_name(in[k].dtype),
                           tn__shape_str(in[k].ndim, in[k].shape, sb), tn_dtype_name(yt.dtype), tn__shape_str(yt.ndim, yt.shape, sy));
    }
    *out = in[0];
    return TN_OK;
}

/* Pool{mode=max, kernel=(2, 2), stride=(2, 2), pad=(0, 0), pad_after=(0, 0), dilation=(1, 1)} (Theano's mode names); PoolGrad{...} */
static void tn__pool_label(const tn_var *node, char *buf, size_t cap) {
    const tn_params *p = &node->p;
    static const char *const mode[3] = { "max", "average_inc_pad", "average_exc_pad" }, *const what[5] = { "kernel", "stride", "pad", "pad_after", "dilation" };
    int nsp = tn__p_conv_nsp(p), m = tn__p_pool_mode(p);
    size_t n = (size_t)snprintf(buf, cap, "%s{mode=%s", tn__op_def(node->op)->name, mode[m >= 0 && m < 3 ? m : 0]);
    for (int w = 0; w < 5 && n < cap; w++) {
        n += (size_t)snprintf(buf + n, cap - n, ", %s=(", what[w]);
        for (int d = 0; d < nsp && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)tn__p_conv_at(p, w, d));
        if (n < cap) n += (size_t)snprintf(buf + n, cap - n, ")");
    }
    if (n < cap) snprintf(buf + n, cap - n, "}");
}

/* v (N, C, out...) as IM2COL's row layout with one row: (C, 1, N, L), dim 1 broadcastable. */
static tn_var *tn__pool_as_rows(tn_var *v, int64_t C, int64_t L, int nsp) {
    int perm[5] = { 1, 0, 2, 3, 4 };
    static const int row[4] = { 0, -1, 1, 2 };
    tn_var *r = tn_reshape(tn_dimshuffle(v, nsp + 2, perm), TN_SHAPE(C, -1, L));
    return tn_dimshuffle(r, 4, row);
}

/* The columns (C, K, N, L) of the forward's window geometry, and the geometry. */
static tn_var *tn__pool_cols(tn_var *node, tn_var *x, tn__cgeo *g) {
    int nsp = tn__p_conv_nsp(&node->p);
    int64_t v[6][3] = { { 0 } }, C = x->type.shape[1];
    for (int w = 0; w < 6; w++) for (int d = 0; d < nsp; d++) v[w][d] = tn__p_conv_at(&node->p, w, d);
    tn_var *cols = tn__im2col("tn_grad", x, nsp, (int)C, v, tn__p_pool_mode(&node->p) == TN__POOL_MAX ? -INFINITY : 0.0);
    if (cols) tn__cgeo_of(&cols->p, -1, C, g);
    return cols;
}

/* POOL's gradient is POOL_GRAD(x, y, g) (>>pool_grad_cpu says what it
   computes); average reads neither x's values nor y, so g stands in for y
   (the gradient then needs no forward pooling). */
static tn_result tn__pool_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *in[3] = { node->in[0], tn__p_pool_mode(&node->p) == TN__POOL_MAX ? node : g, g };
    gin[0] = tn__node(node->graph, TN_OP_POOL_GRAD, 3, in, &node->p, NULL, "tn_grad");
    return gin[0] ? TN_OK : tn__gfail("Pool", node);
}

/* POOL_GRAD is linear in gy, and piecewise constant in x and y (which
   positions tie with the max: no gradient, as eq has none). Its transpose
   for g (an image): average, POOL(g) itself (each window's sum of g over its
   count); max, each window's sum of g over the positions equal to its max
   (IM2COL of g masked by eq(IM2COL(x), y), summed over the window). */
static tn_result tn__pool_grad_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    if (!need[2]) return TN_OK;
    if (tn__p_pool_mode(&node->p) != TN__POOL_MAX) {
        gin[2] = tn__node(node->graph, TN_OP_POOL, 1, &g, &node->p, NULL, "tn_grad");
        return gin[2] ? TN_OK : tn__gfail("PoolGrad", node);
    }
    tn__cgeo geo;
    tn_var *x = node->in[0], *cols = tn__pool_cols(node, x, &geo), *cg = NULL;
    int ax = 1;
    if (cols) {
        tn_params p = cols->p;
        p.f[0] = 0;
        cg = tn__node(x->graph, TN_OP_IM2COL, 1, &g, &p, NULL, "tn_grad");
    }
    tn_var *m = cols ? tn_eq(cols, tn__pool_as_rows(node->in[1], geo.C, geo.L, geo.nsp)) : NULL;
    tn_var *r = cg && m ? tn_sum(tn__gmask(m, cg), &ax, 1, false) : NULL;
    gin[2] = r ? tn__conv_unflatten(r, geo.C, geo.nsp, &geo) : NULL;
    return gin[2] ? TN_OK : tn__gfail("PoolGrad", node);
}

/* Forward mode: linear in gy (x and y move no mask). */
static tn_result tn__pool_grad_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    if (!t[2]) return TN_OK;
    tn_var *in[3] = { node->in[0], node->in[1], t[2] };
    *out = tn__node(node->graph, TN_OP_POOL_GRAD, 3, in, &node->p, NULL, "tn_rop");
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

/* Forward mode: average pooling is linear (the op on the tangent); max the
   mean of the tangents at the positions equal to the max (the reduction's rule). */
static tn_result tn__pool_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    if (!t[0]) return TN_OK;
    if (tn__p_pool_mode(&node->p) != TN__POOL_MAX) {
        *out = tn__node(node->graph, TN_OP_POOL, 1, (tn_var *const *)t, &node->p, NULL, "tn_rop");
        return *out ? TN_OK : tn__gfail("a tangent", node);
    }
    tn__cgeo geo;
    tn_var *x = node->in[0], *cols = tn__pool_cols(node, x, &geo), *ct = NULL;
    int ax = 1;
    if (cols) {
        tn_params p = cols->p;
        p.f[0] = 0;
        ct = tn__node(x->graph, TN_OP_IM2COL, 1, &t[0], &p, NULL, "tn_rop");
    }
    tn_var *m = cols ? tn_cast(tn_eq(cols, tn__pool_as_rows(node, geo.C, geo.L, geo.nsp)), x->type.dtype) : NULL;
    tn_var *r = ct && m ? tn_sum(tn_mul(ct, tn_div(m, tn_sum(m, &ax, 1, true))), &ax, 1, false) : NULL;
    *out = r ? tn__conv_unflatten(r, geo.C, geo.nsp, &geo) : NULL;
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

static tn_var *tn__pool_make(const char *who, tn_var *x, const tn_conv_opts *o, bool max, int want_nsp) {
    if (!x) { tn__err_null(who, "x"); return NULL; }
    if (!o) { tn__err_null(who, "o (the options, with the kernel)"); return NULL; }
    if (tn__conv_check(who, x, want_nsp, true) != TN_OK) return NULL;
    int nsp = x->type.ndim - 2;
    int64_t k[3] = { 0 }, v[6][3] = { { 0 } };
    for (int d = 0; d < nsp; d++) k[d] = o->kernel[d];
    if (o->groups > 1 || o->pad_mode == TN_PAD_SAME) { tn__err(TN_ERR_INVALID, "%s: pooling takes no groups and no 'same' padding", who); return NULL; }
    if (tn__conv_geometry(who, x, k, o, true, v) != TN_OK) return NULL;
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_conv(&p, nsp, 1, (const int64_t (*)[3])v, 0.0);
    tn__p_set_pool_mode(&p, max ? TN__POOL_MAX : o->avg_exclude_pad ? TN__POOL_AVG_EXCL : TN__POOL_AVG);
    return tn__node(x->graph, TN_OP_POOL, 1, &x, &p, NULL, who);
}

TN_API tn_var *tn_max_pool(tn_var *x, const tn_conv_opts *o) { return tn__pool_make("tn_max_pool", x, o, true, 0); }
TN_API tn_var *tn_avg_pool(tn_var *x, const tn_conv_opts *o) { return tn__pool_make("tn_avg_pool", x, o, false, 0); }
TN_API tn_var *tn_max_pool2d(tn_var *x, const tn_conv_opts *o) { return tn__pool_make("tn_max_pool2d", x, o, true, 2); }
TN_API tn_var *tn_avg_pool2d(tn_var *x, const tn_conv_opts *o) { return tn__pool_make("tn_avg_pool2d", x, o, false, 2); }

TN_API tn_var *tn_global_avg_pool(tn_var *x) {
    const char *who = "tn_global_avg_pool";
    if (!x) { tn__err_null(who, "x"); return NULL; }
    if (tn__conv_check(who, x, 0, true) != TN_OK) return NULL;
    int ax[3] = { 2, 3, 4 };
    return tn_mean(x, ax, x->type.ndim - 2, true);
}

/* >>conv_rows: this part's rows of the op table (the >>ops_table section) --- */
#define TN__CONV_OP_ROWS \
    { .op = TN_OP_IM2COL, .name = "Im2Col", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__conv_infer, .cpu = tn__conv_cpu, \
                       .label = tn__conv_label, .vjp = tn__conv_vjp, .flags = TN_OPF_LINEAR }, \
    { .op = TN_OP_COL2IM, .name = "Col2Im", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__conv_infer, .cpu = tn__conv_cpu, \
                       .label = tn__conv_label, .vjp = tn__conv_vjp, .flags = TN_OPF_LINEAR }, \
    { .op = TN_OP_POOL, .name = "Pool", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__pool_infer, .cpu = tn__pool_cpu, \
                       .label = tn__pool_label, .vjp = tn__pool_vjp, .jvp = tn__pool_jvp }, \
    { .op = TN_OP_POOL_GRAD, .name = "PoolGrad", .kind = TN_OPK_OTHER, .arity = 3, .infer = tn__pool_grad_infer, .cpu = tn__pool_grad_cpu, \
                       .label = tn__pool_label, .vjp = tn__pool_grad_vjp, .jvp = tn__pool_grad_jvp },

/* >>ops_print ========================================================= */
/* Print (the >>constructors' tn_print): a copy of its input (TN_OPK_OTHER:
   never folded into a constant, and run only when the function runs: a
   view would also run when the executor probes a call for graph replay). */
static tn_result tn__print_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)node;
    *out = in[0];
    return TN_OK;
}

/* The lines of node's attributes of x (a host array). */
static tn_result tn__print_show(const tn_var *node, const tn_array *x) {
    unsigned at = tn__p_print_attrs(&node->p);
    const char *m = tn__p_print_msg(&node->p);
    if (!at) at = TN_PRINT_VALUE;
    if (at & TN_PRINT_VALUE) {
        printf("%s __str__ = ", m);
        tn_result r = tn_array_print(x, stdout);
        if (r != TN_OK) return r;
    }
    if (at & TN_PRINT_SHAPE) {
        char sb[160];
        printf("%s shape = %s\n", m, tn__shape_str(x->ndim, x->shape, sb));
    }
    if (at & (TN_PRINT_MEAN | TN_PRINT_MAX | TN_PRINT_MIN)) {
        int64_t n = tn_array_size(x), idx[TN_MAX_DIMS] = { 0 };
        double sum = 0, mx = -INFINITY, mn = INFINITY;
        bool nan = false;
        for (int64_t k = 0; k < n; k++) {
            double v = tn_array_get(x, idx);
            nan |= isnan(v);
            sum += v; mx = v > mx ? v : mx; mn = v < mn ? v : mn;
            for (int d = x->ndim - 1; d >= 0 && ++idx[d] == x->shape[d]; d--) idx[d] = 0;
        }
        if (at & TN_PRINT_MEAN) printf("%s mean = %.17g\n", m, n ? sum / (double)n : NAN);
        if (at & TN_PRINT_MAX) printf("%s max = %.17g\n", m, nan ? NAN : mx);
        if (at & TN_PRINT_MIN) printf("%s min = %.17g\n", m, nan ? NAN : mn);
    }
    fflush(stdout);
    return TN_OK;
}

static tn_result tn__print_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_result r = tn__print_show(node, in[0]);
    return r != TN_OK ? r : tn_array_assign(out[0], in[0]);
}

/* Print{message} */
static void tn__print_label(const tn_var *node, char *buf, size_t cap) { snprintf(buf, cap, "Print{%s}", tn__p_print_msg(&node->p)); }

static tn_result tn__print_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)node; (void)need;
    gin[0] = g;
    return TN_OK;
}

TN_API tn_var *tn_print(tn_var *x, const char *message, unsigned attrs) {
    if (!x) { tn__err_null("tn_print", "x"); return NULL; }
    if (attrs & ~(unsigned)(TN_PRINT_VALUE | TN_PRINT_SHAPE | TN_PRINT_MEAN | TN_PRINT_MAX | TN_PRINT_MIN)) {
        tn__err(TN_ERR_INVALID, "tn_print: attrs 0x%x has bits that are not TN_PRINT_*", attrs);
        return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_print(&p, attrs, message);
    return tn__node(x->graph, TN_OP_PRINT, 1, &x, &p, NULL, "tn_print");
}

/* >>print_rows: this part's rows of the op table (the >>ops_table section) --- */
#define TN__PRINT_OP_ROWS \
    { .op = TN_OP_PRINT, .name = "Print", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__print_infer, .cpu = tn__print_cpu, \
                      .label = tn__print_label, .vjp = tn__print_vjp, .flags = TN_OPF_LINEAR },

/* >>ops_linalg ======================================================== */
/* Dot, gemm, gemv, outer; the CPU matrix product; the CBLAS loader.

   Every product, whatever the op, becomes one "plan": a batch of 2-d products
   out[b] = alpha * A[b] @ B[b] (+ beta * Cin[b]) given by byte strides, so 1-d
   operands, transposed and sliced views and broadcast batch dims need no copy.
   A plan runs on CBLAS when a library was found and the operands are row- or
   column-contiguous (float32/float64), else on the built-in kernels:
     float32/float64/float16  packed, cache-blocked, register-blocked (below)
     int32/int64              a blocked i-k-j loop, wrapping like NumPy
*/
#include <dlfcn.h>
#include <limits.h>

/* >>blas_loader --------------------------------------------------------- */
/* The few CBLAS entry points we use, declared here (no cblas.h): enums are
   passed as int, sizes as 32-bit int (LP64 builds of OpenBLAS and netlib). */
enum { TN__CBLAS_ROW_MAJOR = 101, TN__CBLAS_NO_TRANS = 111, TN__CBLAS_TRANS = 112 };
typedef void (*tn__cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                                   const float *, int, float, float *, int);
typedef void (*tn__cblas_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                                   const double *, int, double, double *, int);
typedef void (*tn__cblas_sgemv_fn)(int, int, int, int, float, const float *, int,
                                   const float *, int, float, float *, int);
typedef void (*tn__cblas_dgemv_fn)(int, int, int, int, double, const double *, int,
                                   const double *, int, double, double *, int);

static struct {
    const char *name;            /* the library loaded, NULL if none */
    tn__cblas_sgemm_fn sgemm;
    tn__cblas_dgemm_fn dgemm;
    tn__cblas_sgemv_fn sgemv;
    tn__cblas_dgemv_fn dgemv;
} tn__blas;
static pthread_once_t tn__blas_once = PTHREAD_ONCE_INIT;
static TN__ATOMIC(bool) tn__blas_on = true;

/* The blas flag (read at the first product): auto tries the optimised
   library first, and a library lacking any of the four symbols (a
   Fortran-only libblas) is closed and the next one tried; none loads
   nothing; a path is the only file tried, and one that cannot be used is
   said once through the log. Either way the built-in kernels remain. */
/* Loads name as the CBLAS library: 0, or 1 (it cannot be opened) or 2 (it
   lacks one of the four functions). */
static int tn__blas_try(const char *name) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) return 1;
    tn__cblas_sgemm_fn sg = (tn__cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    tn__cblas_dgemm_fn dg = (tn__cblas_dgemm_fn)dlsym(h, "cblas_dgemm");
    tn__cblas_sgemv_fn sv = (tn__cblas_sgemv_fn)dlsym(h, "cblas_sgemv");
    tn__cblas_dgemv_fn dv = (tn__cblas_dgemv_fn)dlsym(h, "cblas_dgemv");
    if (!(sg && dg && sv && dv)) { dlclose(h); return 2; }
    tn__blas.sgemm = sg; tn__blas.dgemm = dg; tn__blas.sgemv = sv; tn__blas.dgemv = dv;
    tn__blas.name = name;
    return 0;                    /* kept open for the life of the process */
}
/* OpenBLAS's threads spin 2^28 cycles (about 0.1 s) after each product
   before they sleep, so the library's own threaded kernels that follow (an
   im2col after a convolution's product, a fused chain) share the cores with
   them and run at a fraction of their speed (on 16 cores: the 64->128
   convolution's forward 4.5-5.0 -> 3.0-3.2 ms with 2^16). Unless the
   process set OPENBLAS_THREAD_TIMEOUT, it is set to TN__OPENBLAS_SPIN
   (2^16 cycles, some 25 us: back-to-back small products, a gemv step's,
   still find the threads awake, where 2^12 made the logistic step 3x slower)
   before OpenBLAS is loaded, which is when it reads it; nothing is changed
   when OpenBLAS is loaded already. setenv is looked up at run time, so the
   includer's feature macros do not matter. */
#ifndef TN__OPENBLAS_SPIN
#define TN__OPENBLAS_SPIN "16"
#endif
static void tn__blas_spin_default(void) {
    if (getenv("OPENBLAS_THREAD_TIMEOUT")) return;
#ifdef RTLD_NOLOAD
    void *loaded = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);
    if (loaded) { dlclose(loaded); return; }
#endif
    void *self = dlopen(NULL, RTLD_LAZY);
    int (*set)(const char *, const char *, int) = NULL;
    if (self) set = (int (*)(const char *, const char *, int))dlsym(self, "setenv");
    if (set) (void)set("OPENBLAS_THREAD_TIMEOUT", TN__OPENBLAS_SPIN, 0);
    if (self) dlclose(self);
}

static void tn__blas_load(void) {
    static const char *const names[] = { "libopenblas.so.0", "libcblas.so.3", "libblas.so.3" };
    const char *want = tn_get_config()->blas;
    if (want && !strcmp(want, "none")) return;
    tn__blas_spin_default();
    if (want && *want && strcmp(want, "auto") != 0) {
        int r = tn__blas_try(want);
        if (r) tn__warn("blas=%s: %s; CPU products use the built-in kernels", want,
                        r == 1 ? "it cannot be opened" : "it lacks cblas_sgemm, cblas_dgemm, cblas_sgemv or cblas_dgemv");
        return;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (tn__blas_try(names[i]) == 0) return;
}

/* Name of the CBLAS library in use, or NULL (none found, or disabled). */
TN_API const char *tn__blas_name(void) {
    pthread_once(&tn__blas_once, tn__blas_load);
    return tn__atomic_load(&tn__blas_on) ? tn__blas.name : NULL;
}

/* Tests switch BLAS off to compare it with the built-in kernels. */
TN_API void tn__blas_enable(bool on) { tn__atomic_store(&tn__blas_on, on); }

/* >>matmul_plan --------------------------------------------------------- */

typedef struct tn__mm_plan {
    tn_dtype dt;                 /* dtype of A, B, Cin and out (one dtype) */
    int64_t m, n, k;
    double alpha, beta;          /* out = alpha*A@B + beta*Cin; Cin unread if NULL or beta == 0 */
    int nb;                      /* batch dims */
    int64_t nbatch;
    int64_t bshape[TN_MAX_DIMS];
    int64_t a_bs[TN_MAX_DIMS], b_bs[TN_MAX_DIMS], c_bs[TN_MAX_DIMS], ci_bs[TN_MAX_DIMS];
    const char *a, *b, *ci;
    char *c;
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs, ci_rs, ci_cs;  /* byte strides of the 2-d operands */
} tn__mm_plan;

/* Byte offsets of batch item `bi` in each operand. */
static void tn__mm_batch_offsets(const tn__mm_plan *p, int64_t bi, int64_t off[4]) {
    off[0] = off[1] = off[2] = off[3] = 0;
    for (int d = p->nb - 1; d >= 0; d--) {
        int64_t i = bi % p->bshape[d];
        bi /= p->bshape[d];
        off[0] += i * p->a_bs[d];
        off[1] += i * p->b_bs[d];
        off[2] += i * p->c_bs[d];
        off[3] += i * p->ci_bs[d];
    }
}

/* Fills a plan for out = A @ B under matmul rules (out already has the
   inferred shape); cin, when given, broadcasts to out. */
static void tn__mm_plan_init(tn__mm_plan *p, const tn_array *A, const tn_array *B, tn_array *out,
                             const tn_array *cin, double alpha, double beta) {
    memset(p, 0, sizeof *p);
    p->dt = out->dtype;
    p->alpha = alpha;
    p->beta = beta;
    bool a1 = A->ndim == 1, b1 = B->ndim == 1;
    size_t es = tn_dtype_size(out->dtype);
    p->a = (const char *)A->data;
    p->b = (const char *)B->data;
    p->c = (char *)out->data;
    if (a1) { p->m = 1; p->k = A->shape[0]; p->a_rs = 0; p->a_cs = A->strides[0]; }
    else {
        p->m = A->shape[A->ndim - 2]; p->k = A->shape[A->ndim - 1];
        p->a_rs = A->strides[A->ndim - 2]; p->a_cs = A->strides[A->ndim - 1];
    }
    if (b1) { p->n = 1; p->b_rs = B->strides[0]; p->b_cs = (int64_t)es; }
    else {
        p->n = B->shape[B->ndim - 1];
        p->b_rs = B->strides[B->ndim - 2]; p->b_cs = B->strides[B->ndim - 1];
    }
    int tail = (a1 ? 0 : 1) + (b1 ? 0 : 1);
    p->nb = out->ndim - tail;
    TN_ASSERT(p->nb >= 0);
    /* out's trailing dims: (m, n), (m), (n) or none */
    int od = out->ndim;
    p->c_rs = a1 ? 0 : out->strides[b1 ? od - 1 : od - 2];
    p->c_cs = b1 ? (int64_t)es : out->strides[od - 1];
    /* Cin's strides broadcast to out's shape, then split the same way. */
    int64_t cis[TN_MAX_DIMS] = {0};
    if (cin) {
        p->ci = (const char *)cin->data;
        for (int d = 0; d < cin->ndim; d++) {
            int od2 = od - cin->ndim + d;
            cis[od2] = cin->shape[d] == 1 ? 0 : cin->strides[d];
        }
        p->ci_rs = a1 ? 0 : cis[b1 ? od - 1 : od - 2];
        p->ci_cs = b1 ? 0 : cis[od - 1];
    }
    p->nbatch = 1;
    int an = a1 ? 0 : A->ndim - 2, bn = b1 ? 0 : B->ndim - 2;
    for (int d = 0; d < p->nb; d++) {
        p->bshape[d] = out->shape[d];
        p->nbatch *= out->shape[d];
        int da = d - (p->nb - an), db = d - (p->nb - bn);
        p->a_bs[d] = (da >= 0 && A->shape[da] != 1) ? A->strides[da] : 0;
        p->b_bs[d] = (db >= 0 && B->shape[db] != 1) ? B->strides[db] : 0;
        p->c_bs[d] = out->strides[d];
        p->ci_bs[d] = cis[d];
    }
}

/* >>blas_path ----------------------------------------------------------- */

/* A 2-d operand as CBLAS sees it: row-major with leading dimension ld,
   possibly transposed. Unit dims have meaningless strides: normalised. */
static bool tn__blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, size_t es,
                            int *trans, int *ld) {
    if (rs % (int64_t)es || cs % (int64_t)es) return false;
    rs /= (int64_t)es; cs /= (int64_t)es;
    if (cols == 1) cs = 1;
    if (rows == 1) rs = cols;
    int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
    if (cs == 1 && rs >= mc && rs <= INT_MAX) { *trans = TN__CBLAS_NO_TRANS; *ld = (int)rs; return true; }
    if (rs == 1 && cs >= mr && cs <= INT_MAX) { *trans = TN__CBLAS_TRANS; *ld = (int)cs; return true; }
    return false;
}

/* A vector's increment in elements, for gemv: positive and a whole number. */
static bool tn__blas_inc(int64_t len, int64_t stride, size_t es, int *inc) {
    if (len == 1) { *inc = 1; return true; }
    if (stride <= 0 || stride % (int64_t)es || stride / (int64_t)es > INT_MAX) return false;
    *inc = (int)(stride / (int64_t)es);
    return true;
}

/* One 2-d product on CBLAS: c = alpha*a@b + beta*c. False: not expressible
   (layout, sizes), and nothing was written. probe: only say whether it is. */
static bool tn__blas_mm2d(bool probe, tn_dtype dt, int64_t m, int64_t n, int64_t k, double alpha,
                          const char *a, int64_t a_rs, int64_t a_cs,
                          const char *b, int64_t b_rs, int64_t b_cs,
                          double beta, char *c, int64_t c_rs, int64_t c_cs) {
    size_t es = tn_dtype_size(dt);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || m == 0 || n == 0 || k == 0) return false;
    int tc, ldc;
    if (!tn__blas_layout(m, n, c_rs, c_cs, es, &tc, &ldc)) return false;
    if (tc == TN__CBLAS_TRANS) {
        /* column-major out: compute out^T = B^T @ A^T instead */
        const char *t = a; a = b; b = t;
        int64_t t0 = m; m = n; n = t0;
        int64_t ars = b_cs, acs = b_rs, brs = a_cs, bcs = a_rs;
        a_rs = ars; a_cs = acs; b_rs = brs; b_cs = bcs;
        t0 = c_rs; c_rs = c_cs; c_cs = t0;
        if (!tn__blas_layout(m, n, c_rs, c_cs, es, &tc, &ldc) || tc != TN__CBLAS_NO_TRANS) return false;
    }
    int ta, lda, tb, ldb, incx, incy;
    if (n == 1) {                /* c[:,0] = A @ b[:,0] */
        if (!tn__blas_layout(m, k, a_rs, a_cs, es, &ta, &lda)) return false;
        if (!tn__blas_inc(k, b_rs, es, &incx) || !tn__blas_inc(m, c_rs, es, &incy)) return false;
        int M = ta == TN__CBLAS_NO_TRANS ? (int)m : (int)k, N = ta == TN__CBLAS_NO_TRANS ? (int)k : (int)m;
        if (probe) return true;
        tn__pool_nap();
        if (dt == TN_F32) tn__blas.sgemv(TN__CBLAS_ROW_MAJOR, ta, M, N, (float)alpha, (const float *)a, lda,
                                         (const float *)b, incx, (float)beta, (float *)c, incy);
        else tn__blas.dgemv(TN__CBLAS_ROW_MAJOR, ta, M, N, alpha, (const double *)a, lda,
                            (const double *)b, incx, beta, (double *)c, incy);
        return true;
    }
    if (m == 1) {                /* c[0,:] = B^T @ a[0,:] */
        if (!tn__blas_layout(k, n, b_rs, b_cs, es, &tb, &ldb)) return false;
        if (!tn__blas_inc(k, a_cs, es, &incx) || !tn__blas_inc(n, c_cs, es, &incy)) return false;
        int tr = tb == TN__CBLAS_NO_TRANS ? TN__CBLAS_TRANS : TN__CBLAS_NO_TRANS;
        int M = tb == TN__CBLAS_NO_TRANS ? (int)k : (int)n, N = tb == TN__CBLAS_NO_TRANS ? (int)n : (int)k;
        if (probe) return true;
        tn__pool_nap();
        if (dt == TN_F32) tn__blas.sgemv(TN__CBLAS_ROW_MAJOR, tr, M, N, (float)alpha, (const float *)b, ldb,
                                         (const float *)a, incx, (float)beta, (float *)c, incy);
        else tn__blas.dgemv(TN__CBLAS_ROW_MAJOR, tr, M, N, alpha, (const double *)b, ldb,
                            (const double *)a, incx, beta, (double *)c, incy);
        return true;
    }
    if (!tn__blas_layout(m, k, a_rs, a_cs, es, &ta, &lda) || !tn__blas_layout(k, n, b_rs, b_cs, es, &tb, &ldb))
        return false;
    if (probe) return true;
    tn__pool_nap();
    if (dt == TN_F32) tn__blas.sgemm(TN__CBLAS_ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, (float)alpha,
                                     (const float *)a, lda, (const float *)b, ldb, (float)beta, (float *)c, ldc);
    else tn__blas.dgemm(TN__CBLAS_ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, alpha,
                        (const double *)a, lda, (const double *)b, ldb, beta, (double *)c, ldc);
    return true;
}

/* >>fill ---------------------------------------------------------------- */
/* Loads and stores of one element as double (float16 through float32). */
static inline double tn__mm_ld(tn_dtype dt, const char *p) {
    switch (dt) {
    case TN_F16: { uint16_t h; memcpy(&h, p, 2); return tn_f16_to_f32(h); }
    case TN_F32: return *(const float *)p;
    case TN_F64: return *(const double *)p;
    case TN_I32: return *(const int32_t *)p;
    case TN_I64: return (double)*(const int64_t *)p;
    default: return 0;
    }
}

/* out = beta*Cin (or 0) over the plan: the product of an empty k, the
   initial value for the BLAS and integer paths. Integers wrap. Cin as it
   is (scale false, or beta 1) is a strided copy, over threads; the rest
   (zeros, beta != 1) goes element by element. */
static void tn__mm_fill(const tn__mm_plan *p, bool scale) {
    if (p->ci && p->beta != 0 && (!scale || p->beta == 1)) {
        /* batch dims, then m and n where not 1: at most out's ndim dims */
        int64_t shape[TN_MAX_DIMS], ds[TN_MAX_DIMS], ss[TN_MAX_DIMS];
        int nd = 0;
        for (int d = 0; d < p->nb; d++, nd++) { shape[nd] = p->bshape[d]; ds[nd] = p->c_bs[d]; ss[nd] = p->ci_bs[d]; }
        if (p->m > 1) { shape[nd] = p->m; ds[nd] = p->c_rs; ss[nd] = p->ci_rs; nd++; }
        if (p->n > 1) { shape[nd] = p->n; ds[nd] = p->c_cs; ss[nd] = p->ci_cs; nd++; }
        tn__copy_strided(p->dt, p->c, ds, p->dt, p->ci, ss, nd, shape);
        return;
    }
    int64_t off[4];
    for (int64_t bi = 0; bi < p->nbatch; bi++) {
        tn__mm_batch_offsets(p, bi, off);
        for (int64_t i = 0; i < p->m; i++)
            for (int64_t j = 0; j < p->n; j++) {
                char *o = p->c + off[2] + i * p->c_rs + j * p->c_cs;
                const char *ci = p->ci ? p->ci + off[3] + i * p->ci_rs + j * p->ci_cs : NULL;
                bool use = ci && p->beta != 0;
                switch (p->dt) {
                case TN_I32: {
                    uint32_t v = use ? (uint32_t)*(const int32_t *)ci : 0;
                    if (scale) v *= (uint32_t)(int64_t)p->beta;
                    *(int32_t *)o = (int32_t)v;
                    break;
                }
                case TN_I64: {
                    uint64_t v = use ? (uint64_t)*(const int64_t *)ci : 0;
                    if (scale) v *= (uint64_t)(int64_t)p->beta;
                    *(int64_t *)o = (int64_t)v;
                    break;
                }
                case TN_F16: {
                    float v = use ? (float)tn__mm_ld(TN_F16, ci) : 0.0f;
                    uint16_t h = tn_f32_to_f16(scale ? (float)p->beta * v : v);
                    memcpy(o, &h, 2);
                    break;
                }
                case TN_F32: {
                    float v = use ? *(const float *)ci : 0.0f;
                    *(float *)o = scale ? (float)p->beta * v : v;
                    break;
                }
                case TN_F64: {
                    double v = use ? *(const double *)ci : 0.0;
                    *(double *)o = scale ? p->beta * v : v;
                    break;
                }
                default: break;
                }
            }
    }
}

/* >>gemm_kernel ---------------------------------------------------------- */
/* The built-in float product, after Goto and van de Geijn: a thread's part
   of C (a task) is cut into column blocks of at most TN__NC; for each slab
   of TN__KC along k, the block's columns of B are packed into NR-column
   panels (contiguous, zero-padded, float16 widened to float32, any strides)
   once, then for each TN__MC rows of the task the rows of A are packed into
   MR-row panels (or, with the AVX-512 kernels and float32/float64 A
   contiguous along k or along m, read where they lie), and an MR x NR
   micro-kernel runs over the panels with its accumulators in registers.
   Sizes (in elements):
     TN__KC 256  a B micro-panel (KC x NR) stays in L1 (8-48 KiB)
     TN__MC 96   the packed A block (MC x KC) stays in L2 (96 KiB f32, 192 KiB f64)
     TN__NC 288  the packed B block (KC x NC) in L2 (288 KiB f32, 576 KiB f64)
   MR x NR is 6 x 8 (float) or 6 x 4 (double) for SSE2: 12 vector accumulators
   of 16; 6 x 16 / 6 x 8 with AVX2+FMA: 12 of 16 ymm registers; 8 x 48 /
   8 x 24 with AVX-512F: 24 of 32 zmm registers (the level is the vector
   math's, >>vmath: the CPU's best or the one a test forces). MC and NC are
   multiples of every MR and NR. Every level computes each element of C by
   the same operations in the same order (a fused multiply-add a k step from
   0, then alpha * acc + beta * C for the first slab and C + alpha * acc for
   the next), so AVX2 and AVX-512 give the same bits. Within a block of MC
   rows the kernel runs along the packed B (in L2) for each MR rows of A (in
   L1). Tasks: one rectangle a thread for a single product, the grid of
   threads that makes them the smallest (a 1000 x 1000 product on 16
   threads: 4 x 4 of 256 x 256), a thread a 2^20 multiply-adds at most;
   tiles of MC x NC (batch, rows, cols) for batched products. Threads share
   nothing but the read-only inputs. */
#define TN__KC 256
#define TN__MC 96
#define TN__NC 288
#define TN__MR_MAX 8
#define TN__NR_MAX 48

/* Micro-kernels: acc[MR*NR] = Ap (kc x MR, packed) @ Bp (kc x NR, packed).
   The portable one uses GCC/clang vector extensions (16-byte vectors: SSE2
   on x86-64, NEON on arm64), so it is vectorised at -O2 whatever the cost
   model; rows are unrolled by hand so the 12 accumulators stay in registers.
   (Plain scalar loops were tried: gcc 12 -O2 vectorises them poorly, ~10x
   slower.) The AVX2+FMA one uses intrinsics in a target("avx2,fma")
   function, so the build needs no -mavx2; -std=c11 turns off FP
   contraction, so FMA must be explicit. Other compilers get scalar loops. */
#if defined(__GNUC__) || defined(__clang__)
typedef float tn__v4f __attribute__((vector_size(16)));
typedef double tn__v2d __attribute__((vector_size(16)));
#define TN__UKR_VEC(NAME, T, V, W) \
    static void NAME(int64_t kc, const T *TN__RESTRICT ap, const T *TN__RESTRICT bp, T *TN__RESTRICT acc) { \
        V c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, \
          c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0}; \
        for (int64_t p = 0; p < kc; p++, ap += 6, bp += 2 * W) { \
            V b0, b1; \
            memcpy(&b0, bp, sizeof b0); \
            memcpy(&b1, bp + W, sizeof b1); \
            T a; \
            a = ap[0]; c00 += a * b0; c01 += a * b1; \
            a = ap[1]; c10 += a * b0; c11 += a * b1; \
            a = ap[2]; c20 += a * b0; c21 += a * b1; \
            a = ap[3]; c30 += a * b0; c31 += a * b1; \
            a = ap[4]; c40 += a * b0; c41 += a * b1; \
            a = ap[5]; c50 += a * b0; c51 += a * b1; \
        } \
        V *o = (V *)(void *)acc; /* acc is aligned for V */ \
        o[0] = c00; o[1] = c01; o[2] = c10; o[3] = c11; o[4] = c20; o[5] = c21; \
        o[6] = c30; o[7] = c31; o[8] = c40; o[9] = c41; o[10] = c50; o[11] = c51; \
    }
TN__UKR_VEC(tn__ukr_f32_vec, float, tn__v4f, 4)
TN__UKR_VEC(tn__ukr_f64_vec, double, tn__v2d, 2)
#define TN__UKR_F32_PORTABLE tn__ukr_f32_vec
#define TN__UKR_F64_PORTABLE tn__ukr_f64_vec
#else
#define TN__UKR_SCALAR(NAME, T, NR) \
    static void NAME(int64_t kc, const T *ap, const T *bp, T *acc) { \
        T c[6 * NR] = {0}; \
        for (int64_t p = 0; p < kc; p++) \
            for (int i = 0; i < 6; i++) \
                for (int j = 0; j < NR; j++) c[i * NR + j] += ap[p * 6 + i] * bp[p * NR + j]; \
        memcpy(acc, c, sizeof c); \
    }
TN__UKR_SCALAR(tn__ukr_f32_scalar, float, 8)
TN__UKR_SCALAR(tn__ukr_f64_scalar, double, 4)
#define TN__UKR_F32_PORTABLE tn__ukr_f32_scalar
#define TN__UKR_F64_PORTABLE tn__ukr_f64_scalar
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#  define TN__HAVE_AVX2_KERNELS 1
#  include <immintrin.h>
#define TN__UKR_AVX2(NAME, T, VT, W, LOAD, BCAST, FMA, STORE) \
    __attribute__((target("avx2,fma"))) \
    static void NAME(int64_t kc, const T *TN__RESTRICT ap, const T *TN__RESTRICT bp, T *TN__RESTRICT acc) { \
        VT c00 = _mm256_setzero_##W(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, \
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00; \
        const int L = (int)(32 / sizeof(T)); \
        for (int64_t p = 0; p < kc; p++, ap += 6, bp += 2 * L) { \
            VT b0 = LOAD(bp), b1 = LOAD(bp + L), a; \
            a = BCAST(ap + 0); c00 = FMA(a, b0, c00); c01 = FMA(a, b1, c01); \
            a = BCAST(ap + 1); c10 = FMA(a, b0, c10); c11 = FMA(a, b1, c11); \
            a = BCAST(ap + 2); c20 = FMA(a, b0, c20); c21 = FMA(a, b1, c21); \
            a = BCAST(ap + 3); c30 = FMA(a, b0, c30); c31 = FMA(a, b1, c31); \
            a = BCAST(ap + 4); c40 = FMA(a, b0, c40); c41 = FMA(a, b1, c41); \
            a = BCAST(ap + 5); c50 = FMA(a, b0, c50); c51 = FMA(a, b1, c51); \
        } \
        STORE(acc + 0 * L, c00); STORE(acc + 1 * L, c01); STORE(acc + 2 * L, c10); \
        STORE(acc + 3 * L, c11); STORE(acc + 4 * L, c20); STORE(acc + 5 * L, c21); \
        STORE(acc + 6 * L, c30); STORE(acc + 7 * L, c31); STORE(acc + 8 * L, c40); \
        STORE(acc + 9 * L, c41); STORE(acc + 10 * L, c50); STORE(acc + 11 * L, c51); \
    }
TN__UKR_AVX2(tn__ukr_f32_avx2, float, __m256, ps, _mm256_loadu_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_storeu_ps)
TN__UKR_AVX2(tn__ukr_f64_avx2, double, __m256d, pd, _mm256_loadu_pd, _mm256_broadcast_sd, _mm256_fmadd_pd, _mm256_storeu_pd)
#endif

#if defined(TN__HAVE_AVX2_KERNELS)
/* AVX-512F: 8 rows of A by 3 vectors of B. A is read through its strides
   (ars between rows, acs between k steps, in elements: a packed panel is
   1 and MR), so A contiguous along k or m needs no packing. mode 0 stores
   the accumulators in acc; 1 to 3 write a whole MR x NR block of C (rows
   ldc apart, contiguous): 1 C += alpha * acc, 2 C = alpha * acc + beta * ci,
   3 C = alpha * acc, the operations of the tile's own loops. */
#define TN__Z(OP, S) _mm512_##OP##_##S    /* the intrinsic OP for element suffix S (ps, pd) */
#define TN__UKRX_AVX512_ROW(R, S) \
    do { \
        T *cr = c + R * ldc; \
        if (mode == 0) { \
            TN__Z(storeu, S)(acc + R * 3 * L, c##R##0); TN__Z(storeu, S)(acc + R * 3 * L + L, c##R##1); \
            TN__Z(storeu, S)(acc + R * 3 * L + 2 * L, c##R##2); \
        } else if (mode == 1) { \
            TN__Z(storeu, S)(cr, TN__Z(add, S)(TN__Z(loadu, S)(cr), TN__Z(mul, S)(va, c##R##0))); \
            TN__Z(storeu, S)(cr + L, TN__Z(add, S)(TN__Z(loadu, S)(cr + L), TN__Z(mul, S)(va, c##R##1))); \
            TN__Z(storeu, S)(cr + 2 * L, TN__Z(add, S)(TN__Z(loadu, S)(cr + 2 * L), TN__Z(mul, S)(va, c##R##2))); \
        } else if (mode == 2) { \
            const T *cir = ci + R * ldci; \
            TN__Z(storeu, S)(cr, TN__Z(add, S)(TN__Z(mul, S)(va, c##R##0), TN__Z(mul, S)(vb, TN__Z(loadu, S)(cir)))); \
            TN__Z(storeu, S)(cr + L, TN__Z(add, S)(TN__Z(mul, S)(va, c##R##1), TN__Z(mul, S)(vb, TN__Z(loadu, S)(cir + L)))); \
            TN__Z(storeu, S)(cr + 2 * L, TN__Z(add, S)(TN__Z(mul, S)(va, c##R##2), TN__Z(mul, S)(vb, TN__Z(loadu, S)(cir + 2 * L)))); \
        } else { \
            TN__Z(storeu, S)(cr, TN__Z(mul, S)(va, c##R##0)); TN__Z(storeu, S)(cr + L, TN__Z(mul, S)(va, c##R##1)); \
            TN__Z(storeu, S)(cr + 2 * L, TN__Z(mul, S)(va, c##R##2)); \
        } \
    } while (0)
#define TN__UKRX_AVX512_STEP(R, S) \
    x = TN__Z(set1, S)(a##R[o]); c##R##0 = TN__Z(fmadd, S)(x, b0, c##R##0); c##R##1 = TN__Z(fmadd, S)(x, b1, c##R##1); \
    c##R##2 = TN__Z(fmadd, S)(x, b2, c##R##2)
#define TN__UKRX_AVX512(NAME, TT, VT, S) \
    __attribute__((target("avx512f"))) \
    static void NAME(int64_t kc, const TT *a, int64_t ars, int64_t acs, const TT *TN__RESTRICT bp, TT *acc, \
                     TT *c, int64_t ldc, const TT *ci, int64_t ldci, TT alpha, TT beta, int mode) { \
        typedef TT T; \
        enum { L = 64 / sizeof(TT) }; \
        VT c00 = TN__Z(setzero, S)(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00, \
           c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00, c40 = c00, c41 = c00, c42 = c00, \
           c50 = c00, c51 = c00, c52 = c00, c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00; \
        const TT *a0 = a, *a1 = a + ars, *a2 = a + 2 * ars, *a3 = a + 3 * ars, *a4 = a + 4 * ars, \
                 *a5 = a + 5 * ars, *a6 = a + 6 * ars, *a7 = a + 7 * ars; \
        int64_t o = 0; \
        for (int64_t p = 0; p < kc; p++, o += acs, bp += 3 * L) { \
            VT b0 = TN__Z(loadu, S)(bp), b1 = TN__Z(loadu, S)(bp + L), b2 = TN__Z(loadu, S)(bp + 2 * L), x; \
            TN__UKRX_AVX512_STEP(0, S); TN__UKRX_AVX512_STEP(1, S); TN__UKRX_AVX512_STEP(2, S); TN__UKRX_AVX512_STEP(3, S); \
            TN__UKRX_AVX512_STEP(4, S); TN__UKRX_AVX512_STEP(5, S); TN__UKRX_AVX512_STEP(6, S); TN__UKRX_AVX512_STEP(7, S); \
        } \
        VT va = TN__Z(set1, S)(alpha), vb = TN__Z(set1, S)(beta); \
        TN__UKRX_AVX512_ROW(0, S); TN__UKRX_AVX512_ROW(1, S); TN__UKRX_AVX512_ROW(2, S); TN__UKRX_AVX512_ROW(3, S); \
        TN__UKRX_AVX512_ROW(4, S); TN__UKRX_AVX512_ROW(5, S); TN__UKRX_AVX512_ROW(6, S); TN__UKRX_AVX512_ROW(7, S); \
    }
TN__UKRX_AVX512(tn__ukrx_f32_avx512, float, __m512, ps)
TN__UKRX_AVX512(tn__ukrx_f64_avx512, double, __m512d, pd)
#undef TN__UKRX_AVX512
#undef TN__UKRX_AVX512_STEP
#undef TN__UKRX_AVX512_ROW
#undef TN__Z
#endif

typedef void (*tn__ukr_f32_fn)(int64_t, const float *, const float *, float *);
typedef void (*tn__ukr_f64_fn)(int64_t, const double *, const double *, double *);
typedef void (*tn__ukrx_f32_fn)(int64_t, const float *, int64_t, int64_t, const float *, float *,
                                float *, int64_t, const float *, int64_t, float, float, int);
typedef void (*tn__ukrx_f64_fn)(int64_t, const double *, int64_t, int64_t, const double *, double *,
                                double *, int64_t, const double *, int64_t, double, double, int);
/* A level's micro-kernels: packed ones (f32, f64), or strided ones with
   their own writes to C (x32, x64; NULL where the level has none). */
typedef struct tn__ukr_set {
    int mr32, nr32, mr64, nr64;
    tn__ukr_f32_fn f32;
    tn__ukr_f64_fn f64;
    tn__ukrx_f32_fn x32;
    tn__ukrx_f64_fn x64;
} tn__ukr_set;

/* The kernels of the vector level in effect (>>vmath's: 0 SSE2, 1 AVX2+FMA, 2 AVX-512F). */
static const tn__ukr_set *tn__ukr_now(void) {
    static const tn__ukr_set sets[3] = {
        { 6, 8, 6, 4, TN__UKR_F32_PORTABLE, TN__UKR_F64_PORTABLE, NULL, NULL },
#ifdef TN__HAVE_AVX2_KERNELS
        { 6, 16, 6, 8, tn__ukr_f32_avx2, tn__ukr_f64_avx2, NULL, NULL },
        { 8, 48, 8, 24, NULL, NULL, tn__ukrx_f32_avx512, tn__ukrx_f64_avx512 },
#endif
    };
    int level = tn__vm_level_now();
#ifdef TN__HAVE_AVX2_KERNELS
    return &sets[level];
#else
    (void)level;
    return &sets[0];
#endif
}

/* Per-thread packing scratch: one block, sized for the largest case at a
   thread's first product and kept for its life (freed by the key's
   destructor when the thread exits), so steady-state calls never allocate. */
#define TN__SCRATCH_BYTES ((size_t)(TN__MC * TN__KC + TN__KC * TN__NC) * sizeof(double) \
                           + (size_t)TN__MC * TN__NC * sizeof(float) + 3 * 64)
static pthread_key_t tn__scratch_key;
static pthread_once_t tn__scratch_once = PTHREAD_ONCE_INIT;
static void tn__scratch_free(void *p) { tn__free(p); }
static void tn__scratch_key_make(void) { (void)pthread_key_create(&tn__scratch_key, tn__scratch_free); }
static char *tn__scratch(void) {
    pthread_once(&tn__scratch_once, tn__scratch_key_make);
    char *s = (char *)pthread_getspecific(tn__scratch_key);
    if (!s) {
        s = (char *)tn__malloc(TN__SCRATCH_BYTES);
        if (s && pthread_setspecific(tn__scratch_key, s) != 0) { tn__free(s); s = NULL; }
    }
    return s;
}
static inline char *tn__align64(char *p) { return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

static inline float tn__ld_f16(const char *p) { uint16_t h; memcpy(&h, p, 2); return tn_f16_to_f32(h); }
static inline float tn__ld_f32(const char *p) { return *(const float *)p; }
static inline double tn__ld_f64(const char *p) { return *(const double *)p; }

/* One task's rows of one column block of C (mh x nc at i0, j0 of batch item
   `off`; nc <= TN__NC), for element type T computed from storage read by
   LOAD, with the level's kernels K. F16OUT: accumulate the whole k range in
   a float32 tile and round to float16 once at the end (mh <= TN__MC).
   DIRECT: the element size whose A may be read where it lies (0: never). */
#define TN__TILE(NAME, T, LOAD, F16OUT, UKR, UKRX, MRF, NRF, DIRECT) \
static void NAME(const tn__mm_plan *P, const tn__ukr_set *K, const int64_t off[4], int64_t i0, int64_t mh, \
                 int64_t j0, int64_t nc, char *scratch) { \
    const int MR = K->MRF, NR = K->NRF; \
    T *ap = (T *)tn__align64(scratch); \
    T *bp = (T *)tn__align64((char *)(ap + TN__MC * TN__KC)); \
    float *ct = (float *)tn__align64((char *)(bp + TN__KC * TN__NC)); \
    const char *A = P->a + off[0] + i0 * P->a_rs, *B = P->b + off[1] + j0 * P->b_cs; \
    char *C = P->c + off[2] + i0 * P->c_rs + j0 * P->c_cs; \
    const char *CI = (P->ci && P->beta != 0) ? P->ci + off[3] + i0 * P->ci_rs + j0 * P->ci_cs : NULL; \
    TN__ALIGNAS(64) T acc[TN__MR_MAX * TN__NR_MAX]; \
    const T alpha = (T)P->alpha, beta = (T)P->beta; \
    const int64_t es = (int64_t)sizeof(T); \
    /* A read in place: contiguous along k (rows ars apart) or along m */ \
    const bool direct = DIRECT && K->UKRX && (P->a_cs == DIRECT || P->a_rs == DIRECT) && P->a_rs % es == 0 && P->a_cs % es == 0; \
    const bool c_unit = P->c_cs == es && P->c_rs % es == 0, ci_unit = !CI || (P->ci_cs == es && P->ci_rs % es == 0); \
    for (int64_t pc = 0; pc < P->k; pc += TN__KC) { \
        int64_t kc = P->k - pc < TN__KC ? P->k - pc : TN__KC; \
        for (int64_t jp = 0; jp < nc; jp += NR) { \
            int64_t w = nc - jp < NR ? nc - jp : NR; \
            for (int64_t p = 0; p < kc; p++) { \
                const char *src = B + (pc + p) * P->b_rs + jp * P->b_cs; \
                T *dst = bp + jp * kc + p * NR; \
                if (DIRECT && P->b_cs == es) memcpy(dst, src, (size_t)w * sizeof(T)); \
                else for (int64_t j = 0; j < w; j++) dst[j] = (T)LOAD(src + j * P->b_cs); \
                for (int64_t j = w; j < NR; j++) dst[j] = 0; \
            } \
        } \
        for (int64_t ic = 0; ic < mh; ic += TN__MC) { \
            int64_t mc = mh - ic < TN__MC ? mh - ic : TN__MC; \
            /* pack the panels the kernel cannot read in place: all, or a short last one */ \
            for (int64_t ip = direct ? mc - mc % MR : 0; ip < mc; ip += MR) { \
                int64_t h = mc - ip < MR ? mc - ip : MR; \
                for (int64_t p = 0; p < kc; p++) { \
                    const char *src = A + (ic + ip) * P->a_rs + (pc + p) * P->a_cs; \
                    T *dst = ap + ip * kc + p * MR; \
                    for (int64_t i = 0; i < h; i++) dst[i] = (T)LOAD(src + i * P->a_rs); \
                    for (int64_t i = h; i < MR; i++) dst[i] = 0; \
                } \
            } \
            for (int64_t ir = 0; ir < mc; ir += MR) { \
                int64_t mr = mc - ir < MR ? mc - ir : MR; \
                for (int64_t jr = 0; jr < nc; jr += NR) { \
                    int64_t nr = nc - jr < NR ? nc - jr : NR; \
                    char *c0 = C + (ic + ir) * P->c_rs + jr * P->c_cs; \
                    const char *ci0 = CI ? CI + (ic + ir) * P->ci_rs + jr * P->ci_cs : NULL; \
                    if (K->UKRX) { \
                        const T *a = ap + ir * kc; \
                        int64_t ars = 1, acs = MR; \
                        if (direct && mr == MR) { \
                            a = (const T *)(const void *)(A + (ic + ir) * P->a_rs + pc * P->a_cs); \
                            ars = P->a_rs / es; acs = P->a_cs / es; \
                        } \
                        int mode = F16OUT || mr < MR || nr < NR || !c_unit ? 0 : pc != 0 ? 1 : !CI ? 3 : ci_unit ? 2 : 0; \
                        K->UKRX(kc, a, ars, acs, bp + jr * kc, acc, (T *)(void *)c0, P->c_rs / es, \
                                (const T *)(const void *)ci0, ci0 ? P->ci_rs / es : 0, alpha, beta, mode); \
                        if (mode) continue; \
                    } else \
                        K->UKR(kc, ap + ir * kc, bp + jr * kc, acc); \
                    for (int64_t i = 0; i < mr; i++) { \
                        const T *ar = acc + i * NR; \
                        if (F16OUT) { \
                            float *cr = ct + (ic + ir + i) * TN__NC + jr; \
                            if (pc == 0) for (int64_t j = 0; j < nr; j++) cr[j] = (float)ar[j]; \
                            else for (int64_t j = 0; j < nr; j++) cr[j] += (float)ar[j]; \
                            continue; \
                        } \
                        char *cr = c0 + i * P->c_rs; \
                        if (pc != 0) \
                            for (int64_t j = 0; j < nr; j++) *(T *)(cr + j * P->c_cs) += alpha * ar[j]; \
                        else if (CI) { \
                            const char *cir = ci0 + i * P->ci_rs; \
                            for (int64_t j = 0; j < nr; j++) \
                                *(T *)(cr + j * P->c_cs) = alpha * ar[j] + beta * (T)LOAD(cir + j * P->ci_cs); \
                        } else \
                            for (int64_t j = 0; j < nr; j++) *(T *)(cr + j * P->c_cs) = alpha * ar[j]; \
                    } \
                } \
            } \
        } \
    } \
    if (F16OUT) \
        for (int64_t i = 0; i < mh; i++) \
            for (int64_t j = 0; j < nc; j++) { \
                float v = (float)alpha * ct[i * TN__NC + j]; \
                if (CI) v += (float)beta * tn__ld_f16(CI + i * P->ci_rs + j * P->ci_cs); \
                uint16_t hv = tn_f32_to_f16(v); \
                memcpy(C + i * P->c_rs + j * P->c_cs, &hv, 2); \
            } \
}
TN__TILE(tn__mm_tile_f32, float, tn__ld_f32, 0, f32, x32, mr32, nr32, 4)
TN__TILE(tn__mm_tile_f16, float, tn__ld_f16, 1, f32, x32, mr32, nr32, 0)
TN__TILE(tn__mm_tile_f64, double, tn__ld_f64, 0, f64, x64, mr64, nr64, 8)
#undef TN__TILE

/* Tasks: (batch item, th rows, tw cols) of C; a task runs its columns in
   blocks of TN__NC. */
typedef struct tn__mm_job {
    const tn__mm_plan *p;
    const tn__ukr_set *K;
    int64_t th, tw, mt, nt;      /* a task's rows and cols; tasks along m and n */
    TN__ATOMIC(int) oom;
} tn__mm_job;

static void tn__mm_float_range(void *ctx, int64_t lo, int64_t hi) {
    tn__mm_job *J = (tn__mm_job *)ctx;
    const tn__mm_plan *P = J->p;
    char *scratch = tn__scratch();
    if (!scratch) { tn__atomic_store(&J->oom, 1); return; }
    int64_t off[4], last_bi = -1;
    for (int64_t t = lo; t < hi; t++) {
        int64_t bi = t / (J->mt * J->nt), r = t % (J->mt * J->nt);
        int64_t i0 = (r / J->nt) * J->th, j1 = (r % J->nt) * J->tw;
        if (i0 >= P->m || j1 >= P->n) continue;
        int64_t mh = P->m - i0 < J->th ? P->m - i0 : J->th, w = P->n - j1 < J->tw ? P->n - j1 : J->tw;
        if (bi != last_bi) { tn__mm_batch_offsets(P, bi, off); last_bi = bi; }
        for (int64_t j0 = j1; j0 < j1 + w; j0 += TN__NC) {
            int64_t nc = j1 + w - j0 < TN__NC ? j1 + w - j0 : TN__NC;
            switch (P->dt) {
            case TN_F32: tn__mm_tile_f32(P, J->K, off, i0, mh, j0, nc, scratch); break;
            case TN_F16: tn__mm_tile_f16(P, J->K, off, i0, mh, j0, nc, scratch); break;
            case TN_F64: tn__mm_tile_f64(P, J->K, off, i0, mh, j0, nc, scratch); break;
            default: TN_ASSERT(0); break;
            }
        }
    }
}

/* Below this many multiply-adds a product runs on the calling thread (int
   products; float products take a thread a TN__MM_THREAD_WORK). */
#define TN__MM_PARALLEL_MIN ((int64_t)1 << 18)
#define TN__MM_THREAD_WORK ((int64_t)1 << 20)

static int64_t tn__round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The tasks: for one product (no batch dims) on several threads, a grid
   of gm x gn rectangles, gm * gn = the threads, rows a multiple of MR and
   cols of NR, the grid whose largest rectangle is the smallest: each
   thread packs its B once per column block and slab. Else (batched,
   float16, whose tile is at most MC rows, or one thread) MC x NC tiles. */
static void tn__mm_tasks(tn__mm_job *J, int threads) {
    const tn__mm_plan *P = J->p;
    int mr = P->dt == TN_F64 ? J->K->mr64 : J->K->mr32, nr = P->dt == TN_F64 ? J->K->nr64 : J->K->nr32;
    J->th = TN__MC; J->tw = TN__NC;
    J->mt = (P->m + TN__MC - 1) / TN__MC; J->nt = (P->n + TN__NC - 1) / TN__NC;
    if (P->dt == TN_F16 || threads <= 1 || P->nbatch > 1) return;
    int64_t best = -1;
    for (int gn = 1; gn <= threads; gn++) {
        if (threads % gn) continue;
        int gm = threads / gn;
        int64_t th = tn__round_up((P->m + gm - 1) / gm, mr), tw = tn__round_up((P->n + gn - 1) / gn, nr);
        if (best < 0 || th * tw < best) { best = th * tw; J->th = th; J->tw = tw; }
    }
    J->mt = (P->m + J->th - 1) / J->th;
    J->nt = (P->n + J->tw - 1) / J->tw;
}

static tn_result tn__mm_float(const tn__mm_plan *P, const char *who) {
    tn__mm_job J = { P, tn__ukr_now(), 0, 0, 0, 0, 0 };
    /* a thread a TN__MM_THREAD_WORK multiply-adds at most: a thread's start costs more than a smaller share */
    double work = (double)P->nbatch * (double)P->m * (double)P->n * (double)P->k, cap = work / (double)TN__MM_THREAD_WORK;
    int threads = tn__num_threads();
    if (cap < threads) threads = cap < 1 ? 1 : (int)cap;
    tn__mm_tasks(&J, threads);
    int64_t ntask = P->nbatch * J.mt * J.nt, grain = ntask / threads;
    tn__parallel_for(ntask, grain < 1 ? 1 : grain, tn__mm_float_range, &J);
    if (tn__atomic_load(&J.oom))
        return tn__err(TN_ERR_OOM, "%s: out of memory for %zu bytes of packing scratch", who, (size_t)TN__SCRATCH_BYTES);
    return TN_OK;
}

/* >>gemv_kernel ---------------------------------------------------------- */
/* Matrix-vector products (m == 1 or n == 1) on the built-in path: packing
   for the micro-kernel would waste NR-fold work on one column. The product
   is seen as y[i] = sum_p M[i, p] x[p] over the `rows` outputs. "Dot form"
   walks each row of M (contiguous along k: vectorised with 8 partial sums);
   "axpy form" is used when M is contiguous along the outputs instead, and
   adds x[p] * M[:, p] into a block of accumulators held in the thread's
   scratch. Tasks are blocks of outputs of one batch item. */
#define TN__MV_BLK 2048
typedef struct tn__mv {
    const tn__mm_plan *P;
    bool axpy;
    int64_t rows, k, nblk;
    int64_t m_rs, m_cs, x_s, y_s, ci_s;   /* byte strides: M (output, k), x, y, Cin */
    int sel;                              /* 0: plan's (A, B) as (M, x); 1: (B^T, A) */
    TN__ATOMIC(int) oom;
} tn__mv;

#define TN__MV_KERNEL(NAME, T, LOAD, STORE_T) \
static void NAME(const tn__mv *V, const char *M, const char *x, char *y, const char *ci, \
                 int64_t i0, int64_t i1, T *acc) { \
    const T alpha = (T)V->P->alpha, beta = (T)V->P->beta; \
    const int64_t k = V->k; \
    if (!V->axpy) { \
        for (int64_t i = i0; i < i1; i++) { \
            const char *row = M + i * V->m_rs; \
            T s8[8] = {0}; \
            int64_t p = 0; \
            if (STORE_T && V->m_cs == (int64_t)sizeof(T) && V->x_s == (int64_t)sizeof(T)) { \
                const T *a = (const T *)row, *b = (const T *)x; \
                for (; p + 8 <= k; p += 8) \
                    for (int j = 0; j < 8; j++) s8[j] += a[p + j] * b[p + j]; \
            } \
            for (; p < k; p++) s8[p & 7] += (T)LOAD(row + p * V->m_cs) * (T)LOAD(x + p * V->x_s); \
            acc[i - i0] = ((s8[0] + s8[4]) + (s8[1] + s8[5])) + ((s8[2] + s8[6]) + (s8[3] + s8[7])); \
        } \
    } else { \
        for (int64_t i = i0; i < i1; i++) acc[i - i0] = 0; \
        for (int64_t p = 0; p < k; p++) { \
            const T xp = (T)LOAD(x + p * V->x_s); \
            const char *col = M + p * V->m_cs; \
            if (STORE_T && V->m_rs == (int64_t)sizeof(T)) { \
                const T *a = (const T *)col; \
                for (int64_t i = i0; i < i1; i++) acc[i - i0] += xp * a[i]; \
            } else \
                for (int64_t i = i0; i < i1; i++) acc[i - i0] += xp * (T)LOAD(col + i * V->m_rs); \
        } \
    } \
    for (int64_t i = i0; i < i1; i++) { \
        T v = alpha * acc[i - i0]; \
        if (ci) v += beta * (T)LOAD(ci + i * V->ci_s); \
        char *o = y + i * V->y_s; \
        if (STORE_T) *(T *)o = v; \
        else { uint16_t h = tn_f32_to_f16((float)v); memcpy(o, &h, 2); } \
    } \
}
TN__MV_KERNEL(tn__mv_f32, float, tn__ld_f32, 1)
TN__MV_KERNEL(tn__mv_f64, double, tn__ld_f64, 1)
TN__MV_KERNEL(tn__mv_f16, float, tn__ld_f16, 0)

static void tn__mv_range(void *ctx, int64_t lo, int64_t hi) {
    tn__mv *V = (tn__mv *)ctx;
    const tn__mm_plan *P = V->P;
    char *scratch = tn__scratch();
    if (!scratch) { tn__atomic_store(&V->oom, 1); return; }
    void *acc = tn__align64(scratch);
    int64_t off[4];
    for (int64_t t = lo; t < hi; t++) {
        int64_t bi = t / V->nblk, i0 = (t % V->nblk) * TN__MV_BLK;
        int64_t i1 = i0 + TN__MV_BLK < V->rows ? i0 + TN__MV_BLK : V->rows;
        tn__mm_batch_offsets(P, bi, off);
        const char *M = V->sel ? P->b + off[1] : P->a + off[0];
        const char *x = V->sel ? P->a + off[0] : P->b + off[1];
        const char *ci = (P->ci && P->beta != 0) ? P->ci + off[3] : NULL;
        char *y = P->c + off[2];
        switch (P->dt) {
        case TN_F32: tn__mv_f32(V, M, x, y, ci, i0, i1, (float *)acc); break;
        case TN_F64: tn__mv_f64(V, M, x, y, ci, i0, i1, (double *)acc); break;
        default: tn__mv_f16(V, M, x, y, ci, i0, i1, (float *)acc); break;
        }
    }
}

static tn_result tn__mv_float(const tn__mm_plan *P, const char *who) {
    tn__mv V;
    memset(&V, 0, sizeof V);
    V.P = P;
    V.k = P->k;
    if (P->n == 1) {             /* y = A @ b[:, 0] */
        V.rows = P->m; V.m_rs = P->a_rs; V.m_cs = P->a_cs; V.x_s = P->b_rs; V.y_s = P->c_rs; V.ci_s = P->ci_rs;
    } else {                     /* y = B^T @ a[0, :] */
        V.sel = 1;
        V.rows = P->n; V.m_rs = P->b_cs; V.m_cs = P->b_rs; V.x_s = P->a_cs; V.y_s = P->c_cs; V.ci_s = P->ci_cs;
    }
    int64_t es = (int64_t)tn_dtype_size(P->dt);
    V.axpy = V.rows > 1 && V.m_cs != es && V.m_rs == es;
    V.nblk = (V.rows + TN__MV_BLK - 1) / TN__MV_BLK;
    int64_t ntask = P->nbatch * V.nblk;
    double work = (double)P->nbatch * (double)V.rows * (double)P->k;
    tn__parallel_for(ntask, work >= (double)TN__MM_PARALLEL_MIN * 4 ? 1 : ntask + 1, tn__mv_range, &V);
    if (tn__atomic_load(&V.oom))
        return tn__err(TN_ERR_OOM, "%s: out of memory for %zu bytes of scratch", who, (size_t)TN__SCRATCH_BYTES);
    return TN_OK;
}

/* >>int_kernel ----------------------------------------------------------- */
/* Integers: out (already beta*Cin) += alpha*A@B, in unsigned arithmetic so
   overflow wraps as in NumPy instead of being undefined. Blocked so a slab
   of B (TN__IKB x TN__INB) is reused across every row of A; the inner loop
   runs along a row of B and C. Threads take blocks of TN__IMB rows. */
#define TN__IKB 128
#define TN__INB 512
#define TN__IMB 32
#define TN__INT_KERNEL(NAME, ST, UT) \
static void NAME(const tn__mm_plan *P, const int64_t off[4], int64_t i0, int64_t i1) { \
    const UT alpha = (UT)(int64_t)P->alpha; \
    const char *A = P->a + off[0], *B = P->b + off[1]; \
    char *C = P->c + off[2]; \
    for (int64_t j0 = 0; j0 < P->n; j0 += TN__INB) { \
        int64_t j1 = P->n - j0 < TN__INB ? P->n : j0 + TN__INB; \
        for (int64_t p0 = 0; p0 < P->k; p0 += TN__IKB) { \
            int64_t p1 = P->k - p0 < TN__IKB ? P->k : p0 + TN__IKB; \
            for (int64_t i = i0; i < i1; i++) { \
                char *cr = C + i * P->c_rs; \
                for (int64_t p = p0; p < p1; p++) { \
                    UT a = alpha * (UT)*(const ST *)(A + i * P->a_rs + p * P->a_cs); \
                    if (!a) continue; \
                    const char *br = B + p * P->b_rs; \
                    if (P->b_cs == (int64_t)sizeof(ST) && P->c_cs == (int64_t)sizeof(ST)) { \
                        ST *TN__RESTRICT c = (ST *)cr; \
                        const ST *TN__RESTRICT b = (const ST *)br; \
                        for (int64_t j = j0; j < j1; j++) c[j] = (ST)((UT)c[j] + a * (UT)b[j]); \
                    } else \
                        for (int64_t j = j0; j < j1; j++) { \
                            ST *c = (ST *)(cr + j * P->c_cs); \
                            *c = (ST)((UT)*c + a * (UT)*(const ST *)(br + j * P->b_cs)); \
                        } \
                } \
            } \
        } \
    } \
}
TN__INT_KERNEL(tn__mm_int32, int32_t, uint32_t)
TN__INT_KERNEL(tn__mm_int64, int64_t, uint64_t)

static void tn__mm_int_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__mm_plan *P = (const tn__mm_plan *)ctx;
    int64_t mt = (P->m + TN__IMB - 1) / TN__IMB, off[4];
    for (int64_t t = lo; t < hi; t++) {
        int64_t bi = t / mt, i0 = (t % mt) * TN__IMB, i1 = i0 + TN__IMB < P->m ? i0 + TN__IMB : P->m;
        tn__mm_batch_offsets(P, bi, off);
        if (P->dt == TN_I32) tn__mm_int32(P, off, i0, i1);
        else tn__mm_int64(P, off, i0, i1);
    }
}

/* >>mm_run --------------------------------------------------------------- */
/* Runs a plan: CBLAS when it can, else the built-in kernels. */
static tn_result tn__mm_run(const tn__mm_plan *P, const char *who) {
    if (P->m == 0 || P->n == 0 || P->nbatch == 0) return TN_OK;
    bool have_c = P->ci && P->beta != 0;
    if (P->k == 0) { tn__mm_fill(P, true); return TN_OK; }
    if (P->dt == TN_I32 || P->dt == TN_I64) {
        tn__mm_fill(P, true);
        int64_t ntask = P->nbatch * ((P->m + TN__IMB - 1) / TN__IMB);
        double work = (double)P->nbatch * (double)P->m * (double)P->n * (double)P->k;
        tn__parallel_for(ntask, work >= (double)TN__MM_PARALLEL_MIN ? 1 : ntask + 1, tn__mm_int_range, (void *)P);
        return TN_OK;
    }
    if ((P->dt == TN_F32 || P->dt == TN_F64) && tn__blas_name() &&
        tn__blas_mm2d(true, P->dt, P->m, P->n, P->k, P->alpha, P->a, P->a_rs, P->a_cs,
                      P->b, P->b_rs, P->b_cs, 0.0, P->c, P->c_rs, P->c_cs)) {
        /* Every batch item has the same strides, so the probe holds for all.
           out starts as Cin (broadcast) and BLAS applies beta, unless out
           already is Cin (an in-place gemm). */
        bool same = have_c && P->ci == P->c && P->ci_rs == P->c_rs && P->ci_cs == P->c_cs &&
                    !memcmp(P->ci_bs, P->c_bs, sizeof P->c_bs);
        if (have_c && !same) tn__mm_fill(P, false);
        int64_t off[4];
        for (int64_t bi = 0; bi < P->nbatch; bi++) {
            tn__mm_batch_offsets(P, bi, off);
            bool ok = tn__blas_mm2d(false, P->dt, P->m, P->n, P->k, P->alpha, P->a + off[0], P->a_rs, P->a_cs,
                                    P->b + off[1], P->b_rs, P->b_cs, have_c ? P->beta : 0.0,
                                    P->c + off[2], P->c_rs, P->c_cs);
            TN_ASSERT(ok);
            (void)ok;
        }
        return TN_OK;
    }
    if (P->m == 1 || P->n == 1) return tn__mv_float(P, who);
    return tn__mm_float(P, who);
}

/* >>linalg_infer --------------------------------------------------------- */

static const char *tn__la_fn(int op) {
    switch (op) {
    case TN_OP_DOT: return "tn_dot";
    case TN_OP_GEMM: return "tn_gemm";
    case TN_OP_GEMV: return "tn_gemv";
    default: return "tn_outer";
    }
}

/* "a (3, 4)" or, when the variable (or what a promotion cast reads) has a
   name, "a 'W' (3, 4)". */
static const char *tn__la_desc(tn_var *const *vars, int k, const char *role, const tn_type *t, char buf[200]) {
    const tn_var *v = vars ? vars[k] : NULL;
    while (v && !v->name && v->op == TN_OP_CAST && v->n_in == 1) v = v->in[0];
    char sh[128];
    tn__shape_str(t->ndim, t->shape, sh);
    if (v && v->name) snprintf(buf, 200, "%s '%s' %s", role, v->name, sh);
    else snprintf(buf, 200, "%s %s", role, sh);
    return buf;
}

/* The operands' dtypes: one numeric dtype (constructors insert casts). */
static tn_result tn__la_dtypes(const char *fn, tn_var *const *vars, const tn_type *in, int n, const char *const *roles) {
    char d[200];
    for (int i = 0; i < n; i++)
        if (in[i].dtype == TN_BOOL || in[i].dtype == TN_DTYPE_NONE || in[i].dtype >= TN_DTYPE_COUNT)
            return tn__err(TN_ERR_DTYPE, "%s: %s has dtype %s; products need int or float operands", fn,
                           tn__la_desc(vars, i, roles[i], &in[i], d), tn_dtype_name(in[i].dtype));
    for (int i = 1; i < n; i++)
        if (in[i].dtype != in[0].dtype) {
            char d0[200];
            return tn__err(TN_ERR_DTYPE, "%s: operands differ in dtype: %s is %s, %s is %s", fn,
                           tn__la_desc(vars, 0, roles[0], &in[0], d0), tn_dtype_name(in[0].dtype),
                           tn__la_desc(vars, i, roles[i], &in[i], d), tn_dtype_name(in[i].dtype));
        }
    return TN_OK;
}

/* Matmul rule for operands ia, ib of the node (roles ra, rb). */
static tn_result tn__matmul_type(const char *fn, tn_var *const *vars, int ia, int ib, const char *ra, const char *rb,
                                 const tn_type *a, const tn_type *b, tn_type *out) {
    char da[200], db[200];
    if (a->ndim == 0 || b->ndim == 0)
        return tn__err(TN_ERR_SHAPE, "%s: %s is 0-d: a matrix product needs at least 1-d operands (use tn_mul for scalars)",
                       fn, a->ndim == 0 ? tn__la_desc(vars, ia, ra, a, da) : tn__la_desc(vars, ib, rb, b, db));
    int64_t ka = a->shape[a->ndim - 1], kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (ka >= 0 && kb >= 0 && ka != kb)
        return tn__err(TN_ERR_SHAPE, "%s: inner dimensions differ: %s and %s", fn,
                       tn__la_desc(vars, ia, ra, a, da), tn__la_desc(vars, ib, rb, b, db));
    int na = a->ndim >= 2 ? a->ndim - 2 : 0, nb = b->ndim >= 2 ? b->ndim - 2 : 0;
    int nbt = na > nb ? na : nb;
    int tail = (a->ndim >= 2) + (b->ndim >= 2);
    if (nbt + tail > TN_MAX_DIMS)
        return tn__err(TN_ERR_SHAPE, "%s: the product of %s and %s has more than %d dims", fn,
                       tn__la_desc(vars, ia, ra, a, da), tn__la_desc(vars, ib, rb, b, db), TN_MAX_DIMS);
    memset(out, 0, sizeof *out);
    out->dtype = a->dtype;
    out->ndim = nbt + tail;
    for (int d = 0; d < nbt; d++) {
        int xa = d - (nbt - na), xb = d - (nbt - nb);
        int64_t sa = xa >= 0 ? a->shape[xa] : 1, sb = xb >= 0 ? b->shape[xb] : 1;
        bool ba = xa < 0 || a->bcast[xa] || sa == 1, bb = xb < 0 || b->bcast[xb] || sb == 1;
        int64_t r;
        if (sa == sb) r = sa;
        else if (ba) r = sb;
        else if (bb) r = sa;
        else if (sa < 0) r = sb;          /* unknown: checked again at call time */
        else if (sb < 0) r = sa;
        else
            return tn__err(TN_ERR_SHAPE, "%s: batch dimensions do not broadcast: %s and %s", fn,
                           tn__la_desc(vars, ia, ra, a, da), tn__la_desc(vars, ib, rb, b, db));
        out->shape[d] = r;
        out->bcast[d] = ba && bb;
    }
    int d = nbt;
    if (a->ndim >= 2) { out->shape[d] = a->shape[a->ndim - 2]; out->bcast[d] = a->bcast[a->ndim - 2]; d++; }
    if (b->ndim >= 2) { out->shape[d] = b->shape[b->ndim - 1]; out->bcast[d] = b->bcast[b->ndim - 1]; }
    return TN_OK;
}

/* The added term (C of gemm, y of gemv) must broadcast to the product
   without changing its shape. */
static tn_result tn__la_addend(const char *fn, tn_var *const *vars, const char *const *roles, const tn_type *in,
                               const tn_type *prod) {
    const tn_type *c = &in[0];
    bool ok = c->ndim <= prod->ndim;
    for (int d = 0; ok && d < c->ndim; d++) {
        int64_t s = c->shape[d], t = prod->shape[prod->ndim - c->ndim + d];
        ok = s == t || s == 1 || s < 0 || t < 0;
    }
    if (ok) return TN_OK;
    char dc[200], da[200], db[200], dp[128];
    return tn__err(TN_ERR_SHAPE, "%s: %s does not broadcast to the product's shape %s of %s and %s", fn,
                   tn__la_desc(vars, 0, roles[0], c, dc), tn__shape_str(prod->ndim, prod->shape, dp),
                   tn__la_desc(vars, 1, roles[1], &in[1], da), tn__la_desc(vars, 2, roles[2], &in[2], db));
}

/* Integer products take integer scales. */
static tn_result tn__la_scales(const char *fn, const tn_params *p, tn_dtype t) {
    if (!p || tn_dtype_is_float(t)) return TN_OK;
    for (int i = 0; i < 2; i++) {
        double s = i ? tn__p_beta(p) : tn__p_alpha(p);
        if (s != floor(s) || fabs(s) > 9.2e18)
            return tn__err(TN_ERR_INVALID, "%s: %s %g is not an integer, but the operands are %s", fn,
                           i ? "beta" : "alpha", s, tn_dtype_name(t));
    }
    return TN_OK;
}

/* Type rule of each linalg op; vars (may be NULL) give names for messages. */
static tn_result tn__la_type(int op, tn_var *const *vars, const tn_params *p, const tn_type *in, tn_type *out) {
    static const char *const r_dot[] = { "a", "b" }, *const r_gemm[] = { "c", "a", "b" },
                             *const r_gemv[] = { "y", "a", "x" };
    const char *fn = tn__la_fn(op);
    char d0[200], d1[200];
    tn_result r;
    switch (op) {
    case TN_OP_DOT:
        if ((r = tn__la_dtypes(fn, vars, in, 2, r_dot)) != TN_OK) return r;
        return tn__matmul_type(fn, vars, 0, 1, "a", "b", &in[0], &in[1], out);
    case TN_OP_OUTER:
        if ((r = tn__la_dtypes(fn, vars, in, 2, r_dot)) != TN_OK) return r;
        if (in[0].ndim != 1 || in[1].ndim != 1)
            return tn__err(TN_ERR_SHAPE, "%s: operands must be vectors (1-d), got %s and %s", fn,
                           tn__la_desc(vars, 0, "a", &in[0], d0), tn__la_desc(vars, 1, "b", &in[1], d1));
        memset(out, 0, sizeof *out);
        out->dtype = in[0].dtype;
        out->ndim = 2;
        out->shape[0] = in[0].shape[0]; out->bcast[0] = in[0].bcast[0];
        out->shape[1] = in[1].shape[0]; out->bcast[1] = in[1].bcast[0];
        return TN_OK;
    case TN_OP_GEMM:
        if ((r = tn__la_dtypes(fn, vars, in, 3, r_gemm)) != TN_OK) return r;
        if ((r = tn__la_scales(fn, p, in[0].dtype)) != TN_OK) return r;
        if ((r = tn__matmul_type(fn, vars, 1, 2, "a", "b", &in[1], &in[2], out)) != TN_OK) return r;
        return tn__la_addend(fn, vars, r_gemm, in, out);
    case TN_OP_GEMV:
        if ((r = tn__la_dtypes(fn, vars, in, 3, r_gemv)) != TN_OK) return r;
        if ((r = tn__la_scales(fn, p, in[0].dtype)) != TN_OK) return r;
        if (in[1].ndim != 2 || in[2].ndim != 1)
            return tn__err(TN_ERR_SHAPE, "%s: needs a matrix (2-d) and a vector (1-d), got %s and %s", fn,
                           tn__la_desc(vars, 1, "a", &in[1], d0), tn__la_desc(vars, 2, "x", &in[2], d1));
        if ((r = tn__matmul_type(fn, vars, 1, 2, "a", "x", &in[1], &in[2], out)) != TN_OK) return r;
        return tn__la_addend(fn, vars, r_gemv, in, out);
    default:
        return tn__err(TN_ERR_INTERNAL, "tn__la_type: op %d is not a linalg op", op);
    }
}

/* A Gemv's ext: NULL, or its epilogue (its input 0 the product, its others
   the node's inputs after the three), as the fusion pass sets it (tensor.h
   >>fuse_epilogue): the device back end applies it as it stores each
   element, the CPU kernel over the product in place. */
static tn_result tn__la_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_ew_program *epi = node->op == TN_OP_GEMV ? (const tn_ew_program *)node->ext : NULL;
    int want = 3 + (epi ? epi->n_in - 1 : 0);
    if (node->op == TN_OP_GEMV && node->n_in && node->n_in != want)     /* the other products' arity is the table's */
        return tn__err(TN_ERR_INVALID, "%s takes %d inputs, got %d", tn__la_fn(node->op), want, node->n_in);
    tn_result r = tn__la_type(node->op, node->in, &node->p, in, out);
    if (r != TN_OK || !epi) return r;
    r = tn__epilogue_type(node, epi, in + 3, out, "Gemv");
    if (r == TN_OK && epi->out_dtype[0] != in[0].dtype)
        return tn__err(TN_ERR_INTERNAL, "Gemv: an epilogue giving %s after a %s product", tn_dtype_name(epi->out_dtype[0]), tn_dtype_name(in[0].dtype));
    return r;
}

/* >>linalg_cpu ------------------------------------------------------------ */

/* A Gemv with an epilogue: the product into the output's buffer (same dtype:
   the fusion pass makes sure), then the epilogue over it in place. An input
   that widens a product of one row (the output then has more) gets the
   product from a one-element block, broadcast as the unfused graph did. */
static tn_result tn__gemv_epi_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_ew_program *epi = (const tn_ew_program *)node->ext;
    tn_array *y = out[0], r = *y;
    double one[2];
    if (in[1]->shape[0] != y->shape[0]) {
        r.shape[0] = in[1]->shape[0];
        r.strides[0] = (int64_t)tn_dtype_size(y->dtype);
        r.data = one;
        if (r.shape[0] != 1) return tn__err(TN_ERR_SHAPE, "Gemv: an epilogue of %lld elements after a product of %lld", (long long)y->shape[0],
                                            (long long)r.shape[0]);
    }
    r.base = NULL;
    tn__mm_plan P;
    tn__mm_plan_init(&P, in[1], in[2], &r, in[0], tn__p_alpha(&node->p), tn__p_beta(&node->p));
    tn_result res = tn__mm_run(&P, tn__la_fn(node->op));
    if (res != TN_OK || y->shape[0] == 0) return res;
    tn_array *ein[TN__RED_MAX_SRC + 1];
    ein[0] = &r;
    for (int e = 1; e < epi->n_in; e++) ein[e] = in[2 + e];
    return tn__cpu_ew_run(epi, ein, out);
}

static tn_result tn__la_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__mm_plan P;
    const char *fn = tn__la_fn(node->op);
    switch (node->op) {
    case TN_OP_DOT:
        tn__mm_plan_init(&P, in[0], in[1], out[0], NULL, 1.0, 0.0);
        break;
    case TN_OP_GEMM:
        tn__mm_plan_init(&P, in[1], in[2], out[0], in[0], tn__p_alpha(&node->p), tn__p_beta(&node->p));
        break;
    case TN_OP_GEMV:
        if (node->ext) return tn__gemv_epi_cpu(node, in, out);
        tn__mm_plan_init(&P, in[1], in[2], out[0], in[0], tn__p_alpha(&node->p), tn__p_beta(&node->p));
        break;
    case TN_OP_OUTER: {
        /* a (m) as an (m, 1) matrix, b (n) as (1, n): a product with k = 1 */
        tn_array a = *in[0], b = *in[1];
        int64_t es = (int64_t)tn_dtype_size(a.dtype);
        a.ndim = 2; a.shape[1] = 1; a.strides[1] = es;
        b.ndim = 2; b.shape[1] = b.shape[0]; b.strides[1] = b.strides[0]; b.shape[0] = 1; b.strides[0] = b.shape[1] * es;
        tn__mm_plan_init(&P, &a, &b, out[0], NULL, 1.0, 0.0);
        break;
    }
    default:
        return tn__err(TN_ERR_INTERNAL, "tn__la_cpu: op %d is not a linalg op", node->op);
    }
    return tn__mm_run(&P, fn);
}

static void tn__la_label(const tn_var *node, char *buf, size_t cap) {
    switch (node->op) {
    case TN_OP_DOT: snprintf(buf, cap, "Dot"); break;
    case TN_OP_GEMM: snprintf(buf, cap, "Gemm{%s}", node->inplace ? "inplace" : "no_inplace"); break;
    case TN_OP_GEMV: {      /* Gemv{no_inplace,epilogue=Composite{tanh(i0)}} */
        tn__sbuf b = { buf, cap, 0 };
        tn__sbuf_put(&b, "Gemv{%s", node->inplace ? "inplace" : "no_inplace");
        if (node->ext) { tn__sbuf_put(&b, ",epilogue="); tn__ew_program_label((const tn_ew_program *)node->ext, &b); }
        tn__sbuf_put(&b, "}");
        break;
    }
    default: snprintf(buf, cap, "Outer"); break;
    }
}

/* >>linalg_constructors --------------------------------------------------- */

/* Promotes the operands to one dtype (a weak scalar addend, at index 0 when
   `weak0`, adopts the product's), checks the type rule before recording
   anything, then records the casts and the node. */
static tn_var *tn__la_build(int op, int n, tn_var **in, const tn_params *p) {
    const char *fn = tn__la_fn(op);
    for (int i = 0; i < n; i++)
        if (!in[i]) { tn__err_null(fn, "operand %d", i); return NULL; }
    for (int i = 1; i < n; i++)
        if (in[i]->graph != in[0]->graph) {
            tn__err(TN_ERR_GRAPH, "%s: operands belong to different graphs", fn);
            return NULL;
        }
    tn_type t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < n; i++) t[i] = in[i]->type;
    bool has_addend = op == TN_OP_GEMM || op == TN_OP_GEMV;
    int first = has_addend ? 1 : 0;
    tn_dtype dt = TN_DTYPE_NONE;
    for (int i = 0; i < n; i++) {
        if (t[i].dtype == TN_BOOL) {
            tn_type out;
            tn__la_type(op, in, p, t, &out);     /* the rule names the bool operand */
            return NULL;
        }
        if (i >= first || !(in[i]->flags & TN_VAR_WEAK)) dt = tn_dtype_promote(dt, t[i].dtype);
    }
    for (int i = 0; i < n; i++) t[i].dtype = dt;
    tn_type out;
    if (tn__la_type(op, in, p, t, &out) != TN_OK) return NULL;
    tn_var *cin[3];
    for (int i = 0; i < n; i++) {
        cin[i] = in[i]->type.dtype == dt ? in[i] : tn_cast(in[i], dt);
        if (!cin[i]) return NULL;
    }
    return tn__node(in[0]->graph, op, n, cin, p, NULL, fn);
}

TN_API tn_var *tn_dot(tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    return tn__la_build(TN_OP_DOT, 2, in, NULL);
}

TN_API tn_var *tn_outer(tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    return tn__la_build(TN_OP_OUTER, 2, in, NULL);
}

TN_API tn_var *tn_gemm(tn_var *c, double alpha, tn_var *a, tn_var *b, double beta) {
    tn_var *in[3] = { c, a, b };
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_gemm(&p, alpha, beta);
    return tn__la_build(TN_OP_GEMM, 3, in, &p);
}

TN_API tn_var *tn_gemv(tn_var *y, double alpha, tn_var *a, tn_var *x, double beta) {
    tn_var *in[3] = { y, a, x };
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_gemm(&p, alpha, beta);
    return tn__la_build(TN_OP_GEMV, 3, in, &p);
}

/* >>linalg_grad ----------------------------------------------------------- */

/* Swaps the last two axes. */
static tn_var *tn__la_mT(tn_var *x) {
    if (!x) return NULL;
    int nd = x->type.ndim, pat[TN_MAX_DIMS];
    for (int d = 0; d < nd; d++) pat[d] = d;
    pat[nd - 1] = nd - 2; pat[nd - 2] = nd - 1;
    return tn_dimshuffle(x, nd, pat);
}

/* Sums away (keepdims off) one axis known to be 1. */
static tn_var *tn__la_drop(tn_var *x, int axis) { return x ? tn_sum(x, &axis, 1, false) : NULL; }

/* Gradients of a @ b (NumPy matmul rules) given g = d cost / d(a @ b). */
static tn_result tn__dot_vjp(tn_var *a, tn_var *b, tn_var *g, const bool *need, tn_var **ga, tn_var **gb) {
    int na = a->type.ndim, nb = b->type.ndim;
    *ga = *gb = NULL;
    if (na == 1 && nb == 1) {
        if (need[0]) *ga = tn_mul(g, b);
        if (need[1]) *gb = tn_mul(g, a);
    } else if (na == 2 && nb == 1) {
        if (need[0]) *ga = tn_outer(g, b);
        if (need[1]) *gb = tn_dot(tn_transpose(a, NULL), g);
    } else if (na == 1 && nb == 2) {
        if (need[0]) *ga = tn_dot(b, g);
        if (need[1]) *gb = tn_outer(a, g);
    } else {   /* batched: vectors become (1, k) and (k, 1) matrices */
        static const int as_row[2] = { -1, 0 }, as_column[2] = { 0, -1 };
        tn_var *A = na == 1 ? tn_dimshuffle(a, 2, as_row) : a;
        tn_var *B = nb == 1 ? tn_dimshuffle(b, 2, as_column) : b;
        tn_var *G = g;
        if (na == 1 && G) {   /* the m dim matmul dropped: before the last */
            int gn = G->type.ndim, pat[TN_MAX_DIMS];
            for (int d = 0; d < gn - 1; d++) pat[d] = d;
            pat[gn - 1] = -1; pat[gn] = gn - 1;
            G = tn_dimshuffle(G, gn + 1, pat);
        }
        if (nb == 1 && G) {   /* the n dim: last */
            int gn = G->type.ndim, pat[TN_MAX_DIMS];
            for (int d = 0; d < gn; d++) pat[d] = d;
            pat[gn] = -1;
            G = tn_dimshuffle(G, gn + 1, pat);
        }
        if (!A || !B || !G) return tn__gfail("Dot", g);
        if (need[0]) {
            *ga = tn__sum_to(tn_dot(G, tn__la_mT(B)), &A->type);
            if (na == 1) *ga = tn__la_drop(*ga, 0);
        }
        if (need[1]) {
            *gb = tn__sum_to(tn_dot(tn__la_mT(A), G), &B->type);
            if (nb == 1) *gb = tn__la_drop(*gb, 1);
        }
    }
    if ((need[0] && !*ga) || (need[1] && !*gb)) return tn__gfail("Dot", g);
    return TN_OK;
}

static tn_result tn__la_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    tn_result r;
    switch (node->op) {
    case TN_OP_DOT: return tn__dot_vjp(node->in[0], node->in[1], g, need, &gin[0], &gin[1]);
    case TN_OP_GEMM: case TN_OP_GEMV: {   /* in: C, A, B: alpha*A@B + beta*C */
        double alpha = tn__p_alpha(&node->p), beta = tn__p_beta(&node->p);
        if ((r = tn__dot_vjp(node->in[1], node->in[2], g, need + 1, &gin[1], &gin[2])) != TN_OK) return r;
        gin[1] = tn__gscale(gin[1], alpha);
        gin[2] = tn__gscale(gin[2], alpha);
        if (need[0]) gin[0] = tn__gscale(g, beta);
        break;
    }
    case TN_OP_OUTER:
        if (need[0]) gin[0] = tn_dot(g, node->in[1]);
        if (need[1]) gin[1] = tn_dot(tn_transpose(g, NULL), node->in[0]);
        break;
    default: return tn__err(TN_ERR_INTERNAL, "tn_grad: no linalg rule for op %d", node->op);
    }
    for (int i = 0; i < node->n_in; i++)
        if (need[i] && !gin[i]) return tn__gfail(tn__op_def(node->op)->name, node);
    return TN_OK;
}

/* Products are bilinear: the tangent is the sum of the product with each
   operand's tangent in its place. */
static tn_result tn__la_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var *r;
    if (node->op == TN_OP_DOT || node->op == TN_OP_OUTER) {
        tn_var *(*f)(tn_var *, tn_var *) = node->op == TN_OP_DOT ? tn_dot : tn_outer;
        r = tn__gadd(t[0] ? f(t[0], node->in[1]) : NULL, t[1] ? f(node->in[0], t[1]) : NULL);
    } else {   /* GEMM, GEMV */
        tn_var *p = tn__gadd(t[1] ? tn_dot(t[1], node->in[2]) : NULL, t[2] ? tn_dot(node->in[1], t[2]) : NULL);
        r = tn__gadd(tn__gscale(p, tn__p_alpha(&node->p)), t[0] ? tn__gscale(t[0], tn__p_beta(&node->p)) : NULL);
        if (r) r = tn__gbcast_like(r, node);
    }
    *out = r;
    return r ? TN_OK : tn__gfail("a tangent", node);
}

/* >>linalg_rows: this part's rows of the op table (the >>ops_table section) --- */
#define TN__LINALG_ROW(E, NAME, ARITY, FLAGS) \
    { .op = TN_OP_##E, .name = NAME, .kind = TN_OPK_LINALG, .arity = ARITY, .infer = tn__la_infer, .cpu = tn__la_cpu, \
                    .label = tn__la_label, .vjp = tn__la_vjp, .jvp = tn__la_jvp, .flags = FLAGS },
#define TN__LINALG_OP_ROWS \
    TN__LINALG_ROW(DOT,   "Dot",   2, 0) \
    TN__LINALG_ROW(GEMM,  "Gemm",  3, TN_OPF_INPLACE_ACC) \
    TN__LINALG_ROW(GEMV,  "Gemv",  -1, TN_OPF_INPLACE_ACC) /* 3 inputs, more with an epilogue (tn__la_infer checks) */ \
    TN__LINALG_ROW(OUTER, "Outer", 2, 0)

/* >>ops_shape ========================================================= */
/* Shape ops: reshape, dimshuffle, slice, flatten, broadcast_to,
   concatenate, stack, alloc/fill, eye, arange.

   View ops (TN_OPK_VIEW: DIMSHUFFLE, SLICE, BROADCAST_TO) never copy: the
   executor hands the kernel out[0] with base, data and device of in[0]; the
   kernel sets data (first element) and strides. RESHAPE and FLATTEN are
   TN_OPK_SHAPE: a reshape of a non-contiguous input cannot be a view, and
   a view slot has no buffer of its own to fall back on. The executor makes
   them views where their input is certain to be contiguous (a kernel's
   output: tensor.h, tn__reshape_aliases); their kernel aliases when called
   with out[0]->data == in[0]->data, else copies.

   Params: the >>params accessors (ops whose rank is not implied by their
   inputs keep it as tn__p_ndim: RESHAPE, DIMSHUFFLE, BROADCAST_TO, ALLOC). */

static tn_params tn__params_zero(void) {
    tn_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* >>shape_infer ---------------------------------------------------------- */

static tn_result tn__infer_reshape(const tn_var *node, const tn_type *in, tn_type *out) {
    int nd = tn__p_ndim(&node->p);
    int64_t size = 1;
    for (int d = 0; d < in[0].ndim; d++) size = in[0].shape[d] < 0 || size < 0 ? -1 : size * in[0].shape[d];
    out->dtype = in[0].dtype;
    out->ndim = nd;
    tn_result r = tn__reshape_target("Reshape", size, in[0].ndim, in[0].shape, nd, tn__p_shape(&node->p), out->shape);
    if (r != TN_OK) return r;
    for (int d = 0; d < nd; d++) out->bcast[d] = out->shape[d] == 1;
    return TN_OK;
}

static tn_result tn__infer_dimshuffle(const tn_var *node, const tn_type *in, tn_type *out) {
    int nd = tn__p_ndim(&node->p);
    bool used[TN_MAX_DIMS] = {false};
    char sb[128];
    out->dtype = in[0].dtype;
    out->ndim = nd;
    for (int k = 0; k < nd; k++) {
        int64_t ax = tn__p_shuffle_src(&node->p, k);
        if (ax == -1) { out->shape[k] = 1; out->bcast[k] = true; continue; }
        if (ax < 0 || ax >= in[0].ndim)
            return tn__err(TN_ERR_AXIS, "DimShuffle: pattern entry %d is axis %lld, out of range for an input of %d dims %s",
                           k, (long long)ax, in[0].ndim, tn__shape_str(in[0].ndim, in[0].shape, sb));
        if (used[ax]) return tn__err(TN_ERR_AXIS, "DimShuffle: axis %lld appears twice in the pattern", (long long)ax);
        used[ax] = true;
        out->shape[k] = in[0].shape[ax];
        out->bcast[k] = in[0].bcast[ax];
    }
    for (int d = 0; d < in[0].ndim; d++)
        if (!used[d] && !in[0].bcast[d] && in[0].shape[d] != 1)
            return tn__err(TN_ERR_SHAPE, "DimShuffle: cannot drop axis %d of an input of shape %s: only broadcastable "
                           "(size 1) dimensions can be dropped", d, tn__shape_str(in[0].ndim, in[0].shape, sb));
    return TN_OK;
}

static tn_result tn__infer_slice(const tn_var *node, const tn_type *in, tn_type *out) {
    *out = in[0];
    for (int d = 0; d < in[0].ndim; d++) {
        int64_t start = tn__p_slice_start(&node->p, d), stop = tn__p_slice_stop(&node->p, d), step = tn__p_slice_step(&node->p, d);
        if (step == TN_NONE) step = 1;
        if (step == 0) return tn__err(TN_ERR_INVALID, "Subtensor: slice step of axis %d cannot be zero", d);
        if (start == TN_NONE && stop == TN_NONE && step == 1) continue;
        if (in[0].shape[d] < 0) { out->shape[d] = -1; out->bcast[d] = false; continue; }
        int64_t first, count;
        tn__slice_resolve(in[0].shape[d], start, stop, step, &first, &count);
        out->shape[d] = count;
        out->bcast[d] = in[0].bcast[d] && count == 1;
    }
    return TN_OK;
}

static tn_result tn__infer_flatten(const tn_var *node, const tn_type *in, tn_type *out) {
    int outdim = tn__p_flatten_outdim(&node->p);
    char sb[128];
    int most = in[0].ndim > 0 ? in[0].ndim : 1;    /* a 0-d input flattens to one dim */
    if (outdim < 1 || outdim > most)
        return tn__err(TN_ERR_INVALID, "Flatten: outdim %d must be in [1, %d] for an input of shape %s", outdim,
                       most, tn__shape_str(in[0].ndim, in[0].shape, sb));
    out->dtype = in[0].dtype;
    out->ndim = outdim;
    for (int d = 0; d < outdim - 1; d++) { out->shape[d] = in[0].shape[d]; out->bcast[d] = in[0].bcast[d]; }
    int64_t n = 1;
    bool bc = true;
    for (int d = outdim - 1; d < in[0].ndim; d++) {
        int64_t k = in[0].shape[d];   /* a product past int64 is unknown here (the call's shapes refuse it) */
        n = k < 0 || n < 0 || (k > 0 && n > INT64_MAX / k) ? -1 : n * k;
        bc = bc && in[0].bcast[d];
    }
    out->shape[outdim - 1] = n;
    out->bcast[outdim - 1] = bc;
    return TN_OK;
}

/* NumPy broadcasting of `from` to a target shape; unknown dims (-1) on
   either side pass, known mismatches are errors naming `who`. */
static tn_result tn__infer_bcast_to(const char *who, const tn_type *from, int nd, const int64_t *shape, tn_type *out) {
    char s1[128], s2[128];
    if (from->ndim > nd)
        return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast %s to %s: the target has fewer dims", who,
                       tn__shape_str(from->ndim, from->shape, s1), tn__shape_str(nd, shape, s2));
    int off = nd - from->ndim;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        out->shape[d] = shape[d];
        out->bcast[d] = shape[d] == 1;
        if (d < off) continue;
        int64_t s = from->shape[d - off];
        if (s >= 0 && s != 1 && shape[d] >= 0 && s != shape[d])
            return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast %s to %s (dim %d: %lld vs %lld)", who,
                           tn__shape_str(from->ndim, from->shape, s1), tn__shape_str(nd, shape, s2), d,
                           (long long)s, (long long)shape[d]);
        if (shape[d] < 0 && s >= 0 && s != 1) out->shape[d] = s;   /* the known side tells */
    }
    return TN_OK;
}

static tn_result tn__infer_broadcast_to(const tn_var *node, const tn_type *in, tn_type *out) {
    out->dtype = in[0].dtype;
    return tn__infer_bcast_to("BroadcastTo", &in[0], tn__p_ndim(&node->p), tn__p_shape(&node->p), out);
}

static tn_result tn__infer_concatenate(const tn_var *node, const tn_type *in, tn_type *out) {
    int n = node->n_in, ax = tn__p_axis(&node->p);
    char s1[128], s2[128];
    if (n < 1) return tn__err(TN_ERR_INVALID, "Join: needs at least one input");
    int nd = in[0].ndim;
    if (ax < 0 || ax >= nd)
        return tn__err(TN_ERR_AXIS, "Join: axis %d is out of range for inputs of %d dims", ax, nd);
    *out = in[0];
    out->bcast[ax] = false;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].ndim != nd)
            return tn__err(TN_ERR_SHAPE, "Join: input %d has %d dims %s but input 0 has %d %s", i, in[i].ndim,
                           tn__shape_str(in[i].ndim, in[i].shape, s1), nd, tn__shape_str(nd, in[0].shape, s2));
        if (i > 0) out->dtype = tn_dtype_promote(out->dtype, in[i].dtype);
        for (int d = 0; d < nd; d++) {
            if (d == ax) continue;
            if (in[i].shape[d] >= 0 && out->shape[d] >= 0 && in[i].shape[d] != out->shape[d])
                return tn__err(TN_ERR_SHAPE, "Join: input %d has shape %s, which differs from %s off axis %d (dim %d)", i,
                               tn__shape_str(nd, in[i].shape, s1), tn__shape_str(nd, in[0].shape, s2), ax, d);
            if (out->shape[d] < 0) out->shape[d] = in[i].shape[d];
            out->bcast[d] = out->bcast[d] || in[i].bcast[d];
        }
        if (in[i].shape[ax] < 0 || total < 0) total = -1;
        else if (in[i].shape[ax] > INT64_MAX - total)
            return tn__err(TN_ERR_SHAPE, "Join: the inputs' sizes along axis %d add up to more than %lld", ax, (long long)INT64_MAX);
        else total += in[i].shape[ax];
    }
    out->shape[ax] = total;
    return TN_OK;
}

/* ALLOC: in[0] the value, broadcast to i[0..ndim) or, with a second input
   `like`, to like's shape (known only at call time when like's is). */
static tn_result tn__infer_alloc(const tn_var *node, const tn_type *in, tn_type *out) {
    tn_result r;
    if (node->n_in < 1 || node->n_in > 2)
        return tn__err(TN_ERR_INVALID, "Alloc: takes a value and optionally a `like` input, got %d inputs", node->n_in);
    if (node->n_in == 2) {
        r = tn__infer_bcast_to("Alloc", &in[0], in[1].ndim, in[1].shape, out);
        for (int d = 0; d < in[1].ndim; d++) out->bcast[d] = in[1].bcast[d];
    } else {
        r = tn__infer_bcast_to("Alloc", &in[0], tn__p_ndim(&node->p), tn__p_shape(&node->p), out);
    }
    out->dtype = in[0].dtype;
    return r;
}

/* Eye's sizes: tn_eye's params, or (tn_eye_var) the values of in[0] and
   in[1], unknown (-1) until they are known (the op table's infer_values). */
static tn_result tn__infer_eye_values(const tn_var *node, const tn_type *in, const tn_array *const *val, tn_type *out) {
    (void)in;
    memset(out, 0, sizeof *out);
    out->dtype = tn__p_out_dtype(&node->p);
    out->ndim = 2;
    for (int d = 0; d < 2; d++) {
        int64_t s = node->n_in == 0 ? (d ? tn__p_eye_m(&node->p) : tn__p_eye_n(&node->p)) : -1;
        if (node->n_in > 0 && val && val[d]) {
            s = tn__load_i(val[d]->dtype, val[d]->data);
            if (s < 0)
                return tn__err(TN_ERR_SHAPE, "Eye: %s ('%s') = %lld is negative (tn_eye_var's n and m are sizes, >= 0)",
                               d ? "m" : "n", tn__var_label_name(node->in[d]), (long long)s);
        }
        out->shape[d] = s;
        out->bcast[d] = s == 1;
    }
    return TN_OK;
}

static tn_result tn__infer_eye(const tn_var *node, const tn_type *in, tn_type *out) {
    return tn__infer_eye_values(node, in, NULL, out);
}

static unsigned tn__eye_value_inputs(const tn_var *node) { return node->n_in == 3 ? 3u : 0u; }   /* n and m */

static tn_result tn__infer_arange(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)in;
    memset(out, 0, sizeof *out);
    int64_t n;
    tn_result r = tn__arange_len("ARange", tn__p_arange_start(&node->p), tn__p_arange_stop(&node->p), tn__p_arange_step(&node->p), &n);
    if (r != TN_OK) return r;
    out->dtype = tn__p_out_dtype(&node->p);
    out->ndim = 1;
    out->shape[0] = n;
    out->bcast[0] = n == 1;
    return TN_OK;
}

/* >>shape_kernels -------------------------------------------------------- */

/* A view kernel's output: in[0]'s storage, with shape and strides given. */
static void tn__set_view(tn_array *o, const tn_array *src, int nd, const int64_t *shape, const int64_t *strides, const char *data) {
    o->dtype = src->dtype;
    o->ndim = nd;
    for (int d = 0; d < nd; d++) { o->shape[d] = shape[d]; o->strides[d] = strides[d]; }
    o->data = (void *)data;
    o->base = src->base;
    o->device = src->device;
}

static tn_result tn__cpu_dimshuffle(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int nd = tn__p_ndim(&node->p);
    int64_t sh[TN_MAX_DIMS], st[TN_MAX_DIMS];
    for (int k = 0; k < nd; k++) {
        int64_t ax = tn__p_shuffle_src(&node->p, k);
        if (ax < 0) { sh[k] = 1; st[k] = 0; }
        else { sh[k] = x->shape[ax]; st[k] = x->strides[ax]; }
    }
    tn__set_view(out[0], x, nd, sh, st, (const char *)x->data);
    return TN_OK;
}

/* The slices of params p applied to x: the view's shape, strides and first element. */
static char *tn__slice_apply(const tn_params *p, const tn_array *x, int64_t *sh, int64_t *st) {
    char *data = (char *)x->data;
    for (int d = 0; d < x->ndim; d++) {
        int64_t start = tn__p_slice_start(p, d), stop = tn__p_slice_stop(p, d), step = tn__p_slice_step(p, d);
        if (step == TN_NONE) step = 1;
        int64_t first, count;
        tn__slice_resolve(x->shape[d], start, stop, step, &first, &count);
        sh[d] = count;
        st[d] = tn__slice_stride(x->strides[d], step, count);
        data += first * x->strides[d];
    }
    return data;
}

static tn_result tn__cpu_slice(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int64_t sh[TN_MAX_DIMS], st[TN_MAX_DIMS];
    const char *data = tn__slice_apply(&node->p, x, sh, st);
    tn__set_view(out[0], x, x->ndim, sh, st, data);
    return TN_OK;
}

static tn_result tn__cpu_broadcast_to(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int nd = tn__p_ndim(&node->p);
    const int64_t *shape = tn__p_shape(&node->p);
    int64_t st[TN_MAX_DIMS];
    if (!tn__broadcast_strides(x, nd, shape, st)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "BroadcastTo: cannot broadcast %s to %s", tn__shape_str(x->ndim, x->shape, s1),
                       tn__shape_str(nd, shape, s2));
    }
    tn__set_view(out[0], x, nd, shape, st, (const char *)x->data);
    return TN_OK;
}

/* RESHAPE and FLATTEN: out[0]'s shape is the inferred one. A view when the
   executor aliased out[0] to in[0] and the layout allows; else a copy into
   out[0]'s own contiguous buffer. */
static tn_result tn__reshape_into(const char *who, const tn_array *x, tn_array *o) {
    if (o->data == x->data && o->base == x->base) {
        int64_t st[TN_MAX_DIMS];
        if (tn__reshape_strides(x->ndim, x->shape, x->strides, o->ndim, o->shape, st, tn_dtype_size(x->dtype))) {
            for (int d = 0; d < o->ndim; d++) o->strides[d] = st[d];
            return TN_OK;
        }
        char s1[128];
        return tn__err(TN_ERR_UNSUPPORTED, "%s: an input of shape %s with these strides cannot be reshaped without a copy", who,
                       tn__shape_str(x->ndim, x->shape, s1));
    }
    /* out[0] is a fresh contiguous buffer: write x's elements in C order */
    if (!tn_array_is_contiguous(o)) return tn__err(TN_ERR_INTERNAL, "%s: output buffer is not contiguous", who);
    int64_t cs[TN_MAX_DIMS];
    tn__contiguous_strides(o->dtype, x->ndim, x->shape, cs);
    tn__copy_strided(o->dtype, o->data, cs, x->dtype, x->data, x->strides, x->ndim, x->shape);
    return TN_OK;
}

static tn_result tn__cpu_reshape(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)node;
    return tn__reshape_into("Reshape", in[0], out[0]);
}

static tn_result tn__cpu_flatten(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)node;
    return tn__reshape_into("Flatten", in[0], out[0]);
}

/* Copies (and converts) the whole of src into dst, both of dst's shape. */
static void tn__copy_array(tn_array *dst, const tn_array *src) {
    tn__copy_strided(dst->dtype, dst->data, dst->strides, src->dtype, src->data, src->strides, dst->ndim, dst->shape);
}

static tn_result tn__cpu_concatenate(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_array *o = out[0];
    int ax = tn__p_axis(&node->p);
    int64_t off = 0;
    for (int i = 0; i < node->n_in; i++) {
        const tn_array *x = in[i];
        if (x->ndim != o->ndim) return tn__err(TN_ERR_SHAPE, "Join: input %d has %d dims, output %d", i, x->ndim, o->ndim);
        tn_array part = *o;                       /* the output's slab for input i */
        part.shape[ax] = x->shape[ax];
        part.data = (char *)o->data + off * o->strides[ax];
        for (int d = 0; d < o->ndim; d++)
            if (d != ax && x->shape[d] != o->shape[d]) {
                char s1[128], s2[128];
                return tn__err(TN_ERR_SHAPE, "Join: input %d has shape %s, which does not fit %s off axis %d", i,
                               tn__shape_str(x->ndim, x->shape, s1), tn__shape_str(o->ndim, o->shape, s2), ax);
            }
        tn__copy_array(&part, x);
        off += x->shape[ax];
    }
    return TN_OK;
}

/* Elements lo..hi of p, es bytes each, set to the value v: one copy, then
   copies of what is done, doubling (a range stays in the core's cache). */
typedef struct tn__fill_job { char *p; size_t es; char v[16]; } tn__fill_job;
static void tn__fill_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__fill_job *J = (const tn__fill_job *)ctx;
    char *p = J->p + lo * (int64_t)J->es;
    int64_t n = hi - lo;
    memcpy(p, J->v, J->es);
    for (int64_t done = 1; done < n;) {
        int64_t k = done < n - done ? done : n - done;
        memcpy(p + done * (int64_t)J->es, p, (size_t)(k * (int64_t)J->es));
        done += k;
    }
}

static tn_result tn__cpu_alloc(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)node;
    tn_array *o = out[0];
    const tn_array *v = in[0];
    int64_t st[TN_MAX_DIMS];
    if (!tn__broadcast_strides(v, o->ndim, o->shape, st)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "Alloc: cannot broadcast a value of shape %s to %s", tn__shape_str(v->ndim, v->shape, s1),
                       tn__shape_str(o->ndim, o->shape, s2));
    }
    if (tn_array_size(v) == 1 && tn_array_is_contiguous(o)) {
        /* one value: converted once, then each thread's range filled by doubling copies */
        tn__fill_job J = { (char *)o->data, tn_dtype_size(o->dtype), { 0 } };
        int64_t n = tn_array_size(o);
        if (n == 0) return TN_OK;
        tn__convert_row(o->dtype, J.v, (int64_t)J.es, v->dtype, (const char *)v->data, 0, 1);
        tn__parallel_for(n, (int64_t)(65536 / J.es), tn__fill_range, &J);   /* ranges of 64 KB or more */
        return TN_OK;
    }
    tn__copy_strided(o->dtype, o->data, o->strides, v->dtype, v->data, st, o->ndim, o->shape);
    return TN_OK;
}

static tn_result tn__cpu_eye(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_array *o = out[0];
    int64_t n = o->shape[0], m = o->shape[1], k = node->n_in == 3 ? tn__load_i(in[2]->dtype, in[2]->data) : tn__p_eye_k(&node->p);
    for (int64_t i = 0; i < n; i++) {
        char *row = (char *)o->data + i * o->strides[0];
        if (o->strides[1] == (int64_t)tn_dtype_size(o->dtype)) memset(row, 0, (size_t)(m * o->strides[1]));
        else for (int64_t j = 0; j < m; j++) tn__store_f(o->dtype, row + j * o->strides[1], 0);
        if (k >= -i && k < m - i) tn__store_f(o->dtype, row + (i + k) * o->strides[1], 1);   /* column i + k, any k */
    }
    return TN_OK;
}

/* >>eye_cuda: Eye's kernel for tensor_cuda.h. out (contiguous n x m) gets
   the bits of one (`one`, the output dtype's 1 as es bytes) where
   j - i == *k, else zero bits, so one kernel per element size serves every
   dtype; k is read on the device (int64), so a new k needs no new launch
   parameters. extern "C" tn_eye(out, n, m, k, one). -1: no kernel for es. */
TN_API int tn__eye_cuda_source(size_t es, char *buf, size_t cap) {
    const char *t = es == 1 ? "unsigned char" : es == 2 ? "unsigned short" : es == 4 ? "unsigned int" : es == 8 ? "unsigned long long" : NULL;
    if (!t) return -1;
    return snprintf(buf, cap,
        "extern \"C\" __global__ void tn_eye(%s *__restrict__ out, long long n, long long m, const long long *__restrict__ kp, %s one) {\n"
        "    const long long k = *kp, total = n * m;\n"
        "    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {\n"
        "        const long long i = t / m, j = t - i * m;\n"
        "        out[t] = j - i == k ? one : (%s)0;\n"
        "    }\n"
        "}\n", t, t, t);
}

/* The bits of one in dtype t (es bytes), for tn_eye's kernel. */
TN_API size_t tn__eye_one_bits(tn_dtype t, unsigned char one[8]) {
    memset(one, 0, 8);
    tn__store_f(t, one, 1);
    return tn_dtype_size(t);
}

static tn_result tn__cpu_arange(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)in;
    tn_array *o = out[0];
    double start = tn__p_arange_start(&node->p), step = tn__p_arange_step(&node->p);
    for (int64_t i = 0; i < o->shape[0]; i++) tn__store_f(o->dtype, (char *)o->data + i * o->strides[0], start + (double)i * step);
    return TN_OK;
}

/* >>gemv_cuda: small matrix-vector products as CUDA C ---------------------- */
/* A cuBLAS gemv kernel takes about twice as long on the device as a minimal
   kernel does (H100), which a loop of small products (a scan's step) pays
   at each product. Up to TN__GEMV_SMALL_MAX elements of the matrix and rows
   of at most TN__GEMV_SMALL_K, the device back end runs this kernel instead:
   one warp per output, its lanes striding along the row, a shuffle sum;
   y[i] = alpha * acc + beta * c[i], c unread when beta is 0 (as BLAS: a NaN
   there does not reach y). Strides in elements; c may be y (in place), or
   another array: a product whose addend must be kept (a shared variable)
   needs no copy of it first, as cuBLAS's in-place gemv does. 2^19 elements
   (2 MB of float32) stay in the L2 cache, so a transposed matrix, whose
   lanes stride down a column, costs no more there than cuBLAS's kernel:
   the logistic step's 400x784 products took 0.5 us less a step. */
#define TN__GEMV_SMALL_MAX 524288
#define TN__GEMV_SMALL_K 1024
/* The store is TN_GEMV_STORE(i, v) and the extra parameters
   TN_GEMV_EPI_PARAMS: y[i] = v and none, unless the source before the
   kernel defines them (tensor_cuda.h's epilogue of a Gemv, which also passes
   k < 0 to read v = c[i], a product cuBLAS already wrote there). */
TN_API int tn__gemv_cuda_source(tn_dtype t, char *buf, size_t cap) {
    if (t != TN_F32 && t != TN_F64) return -1;
    return snprintf(buf, cap,
        "typedef %s T;\n"
        "#ifndef TN_GEMV_STORE\n"
        "#define TN_GEMV_EPI_PARAMS\n"
        "#define TN_GEMV_STORE(i, v) (y[i] = (v))\n"
        "#endif\n"
        "extern \"C\" __global__ void tn_gemv_small(const T *__restrict__ M, long long m_rs, long long m_cs,\n"
        "        const T *__restrict__ x, long long x_s, const T *c, long long c_s, T *y, int rows, int k, T alpha, T beta TN_GEMV_EPI_PARAMS) {\n"
        "    int i = (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;\n"
        "    if (i >= rows) return;               /* a whole warp */\n"
        "    if (k < 0) { if (lane == 0) TN_GEMV_STORE(i, c[i * c_s]); return; }\n"
        "    const T *r = M + i * m_rs;\n"
        "    T acc = 0;\n"
        "    for (int p = lane; p < k; p += 32) acc += r[p * m_cs] * x[p * x_s];\n"
        "    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);\n"
        "    if (lane == 0) TN_GEMV_STORE(i, beta != (T)0 ? alpha * acc + beta * c[i * c_s] : alpha * acc);\n"
        "}\n", t == TN_F32 ? "float" : "double");
}

/* >>shape_labels: Theano's names ---------------------------------------- */

static void tn__label_reshape(const tn_var *node, char *buf, size_t cap) {
    snprintf(buf, cap, "Reshape{%d}", tn__p_ndim(&node->p));
}

static void tn__label_dimshuffle(const tn_var *node, char *buf, size_t cap) {
    tn__sbuf b = { buf, cap, 0 };
    tn__sbuf_put(&b, "%sDimShuffle{", node->inplace ? "Inplace" : "");
    int nd = tn__p_ndim(&node->p);
    for (int k = 0; k < nd; k++) {
        int src = tn__p_shuffle_src(&node->p, k);
        if (src < 0) tn__sbuf_put(&b, "%sx", k ? "," : "");
        else tn__sbuf_put(&b, "%s%d", k ? "," : "", src);
    }
    tn__sbuf_put(&b, "}");
}

/* The slices of a node (SLICE, INC_SUBTENSOR) as "::, 1:3:": one
   "start:stop:step" per dim up to the last sliced one. */
static void tn__slice_text(const tn_var *node, tn__sbuf *bp) {
    int nd = node->in && node->in[0] ? node->in[0]->type.ndim : TN_MAX_DIMS, last = -1;
    for (int d = 0; d < nd; d++)
        if (!tn__p_slice_whole(&node->p, d)) last = d;
    tn__sbuf b = *bp;
    if (last < 0) tn__sbuf_put(&b, "::");
    for (int d = 0; d <= last; d++) {
        const int64_t s[3] = { tn__p_slice_start(&node->p, d), tn__p_slice_stop(&node->p, d), tn__p_slice_step(&node->p, d) };
        if (d) tn__sbuf_put(&b, ", ");
        for (int j = 0; j < 3; j++) {
            bool omit = s[j] == TN_NONE || (j == 2 && s[j] == 1);
            if (!omit) tn__sbuf_put(&b, "%lld", (long long)s[j]);
            if (j < 2) tn__sbuf_put(&b, ":");
        }
    }
    *bp = b;
}

/* Subtensor{::, 1:3:} */
static void tn__label_slice(const tn_var *node, char *buf, size_t cap) {
    tn__sbuf b = { buf, cap, 0 };
    tn__sbuf_put(&b, "Subtensor{");
    tn__slice_text(node, &b);
    tn__sbuf_put(&b, "}");
}

static void tn__label_flatten(const tn_var *node, char *buf, size_t cap) { snprintf(buf, cap, "Flatten{%d}", tn__p_flatten_outdim(&node->p)); }

static void tn__label_broadcast_to(const tn_var *node, char *buf, size_t cap) {
    char sb[128];
    snprintf(buf, cap, "BroadcastTo{%s}", tn__shape_str(tn__p_ndim(&node->p), tn__p_shape(&node->p), sb));
}

static void tn__label_concatenate(const tn_var *node, char *buf, size_t cap) { snprintf(buf, cap, "Join{axis=%d}", tn__p_axis(&node->p)); }
static void tn__label_alloc(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "Alloc"); }
static void tn__label_eye(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "Eye"); }
static void tn__label_arange(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "ARange"); }

/* >>shape_constructors --------------------------------------------------- */

static tn_var *tn__null_arg(const char *who, const char *what) {
    tn__err_null(who, "%s", what);
    return NULL;
}

/* "'name' " or "" for messages */
static const char *tn__var_nm(const tn_var *v) { return v && v->name ? v->name : "?"; }

TN_API tn_var *tn_reshape(tn_var *x, int ndim, const int64_t *shape) {
    if (!x) return tn__null_arg("tn_reshape", "x");
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "tn_reshape: ndim %d is outside [0, %d]", ndim, TN_MAX_DIMS); return NULL; }
    if (ndim > 0 && !shape) return tn__null_arg("tn_reshape", "shape");
    tn_params p = tn__params_zero();
    tn__p_set_shape(&p, ndim, shape);
    return tn__node(x->graph, TN_OP_RESHAPE, 1, &x, &p, NULL, "tn_reshape");
}

TN_API tn_var *tn_dimshuffle(tn_var *x, int ndim, const int *pattern) {
    if (!x) return tn__null_arg("tn_dimshuffle", "x");
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "tn_dimshuffle: ndim %d is outside [0, %d]", ndim, TN_MAX_DIMS); return NULL; }
    if (ndim > 0 && !pattern) return tn__null_arg("tn_dimshuffle", "pattern");
    tn_params p = tn__params_zero();
    for (int k = 0; k < ndim; k++) {
        if (pattern[k] < -1) {
            tn__err(TN_ERR_AXIS, "tn_dimshuffle: pattern[%d] = %d: use an axis of '%s' (0..%d) or -1 for a new broadcastable dim",
                    k, pattern[k], tn__var_nm(x), x->type.ndim - 1);
            return NULL;
        }
    }
    tn__p_set_shuffle(&p, ndim, pattern);
    return tn__node(x->graph, TN_OP_DIMSHUFFLE, 1, &x, &p, NULL, "tn_dimshuffle");
}

TN_API tn_var *tn_transpose(tn_var *x, const int *perm) {
    if (!x) return tn__null_arg("tn_transpose", "x");
    int nd = x->type.ndim, pat[TN_MAX_DIMS];
    bool seen[TN_MAX_DIMS] = {false};
    for (int k = 0; k < nd; k++) {
        int a = perm ? perm[k] : nd - 1 - k;
        if (a < 0) a += nd;
        if (a < 0 || a >= nd || seen[a]) {
            tn__err(TN_ERR_AXIS, "tn_transpose: perm[%d] = %d is %s for '%s' with %d dims", k, perm[k],
                    a >= 0 && a < nd ? "repeated" : "out of range", tn__var_nm(x), nd);
            return NULL;
        }
        seen[a] = true;
        pat[k] = a;
    }
    return tn_dimshuffle(x, nd, pat);
}

TN_API tn_var *tn_slice(tn_var *x, int axis, int64_t start, int64_t stop, int64_t step) {
    if (!x) return tn__null_arg("tn_slice", "x");
    int nd = x->type.ndim, ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd) {
        char sb[128];
        tn__err(TN_ERR_AXIS, "tn_slice: axis %d is out of range for '%s' of shape %s", axis, tn__var_nm(x),
                tn__shape_str(nd, x->type.shape, sb));
        return NULL;
    }
    if (step == 0) { tn__err(TN_ERR_INVALID, "tn_slice: slice step cannot be zero"); return NULL; }
    tn_params p = tn__params_zero();
    tn__p_set_slice_whole(&p);
    tn__p_set_slice(&p, ax, start, stop, step);    /* a step of 1 is spelled TN_NONE, so merge sees equal nodes */
    return tn__node(x->graph, TN_OP_SLICE, 1, &x, &p, NULL, "tn_slice");
}

TN_API tn_var *tn_flatten(tn_var *x, int outdim) {
    if (!x) return tn__null_arg("tn_flatten", "x");
    tn_params p = tn__params_zero();
    tn__p_set_flatten_outdim(&p, outdim);
    return tn__node(x->graph, TN_OP_FLATTEN, 1, &x, &p, NULL, "tn_flatten");
}

/* A target shape as params (tn__p_set_shape); false with
   the error set when ndim is out of range, shape is NULL or a dim negative. */
static bool tn__shape_params(const char *who, int ndim, const int64_t *shape, tn_params *p) {
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "%s: ndim %d is outside [0, %d]", who, ndim, TN_MAX_DIMS); return false; }
    if (ndim > 0 && !shape) { tn__null_arg(who, "shape"); return false; }
    *p = tn__params_zero();
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            char sb[128];
            tn__err(TN_ERR_SHAPE, "%s: negative dimension in shape %s", who, tn__shape_str(ndim, shape, sb));
            return false;
        }
    }
    tn__p_set_shape(p, ndim, shape);
    return true;
}

TN_API tn_var *tn_broadcast_to(tn_var *x, int ndim, const int64_t *shape) {
    if (!x) return tn__null_arg("tn_broadcast_to", "x");
    tn_params p;
    if (!tn__shape_params("tn_broadcast_to", ndim, shape, &p)) return NULL;
    return tn__node(x->graph, TN_OP_BROADCAST_TO, 1, &x, &p, NULL, "tn_broadcast_to");
}

TN_API tn_var *tn_concatenate(int n, tn_var *const *xs, int axis) {
    if (n < 1 || !xs) { tn__err(TN_ERR_INVALID, "tn_concatenate: needs at least one input (n = %d)", n); return NULL; }
    for (int i = 0; i < n; i++)
        if (!xs[i]) { tn__err_null("tn_concatenate", "input %d", i); return NULL; }
    int nd = xs[0]->type.ndim, ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd) {
        tn__err(TN_ERR_AXIS, "tn_concatenate: axis %d is out of range for inputs of %d dims", axis, nd);
        return NULL;
    }
    tn_params p = tn__params_zero();
    tn__p_set_axis(&p, ax);
    return tn__node(xs[0]->graph, TN_OP_CONCATENATE, n, xs, &p, NULL, "tn_concatenate");
}

TN_API tn_var *tn_stack(int n, tn_var *const *xs, int axis) {
    if (n < 1 || !xs) { tn__err(TN_ERR_INVALID, "tn_stack: needs at least one input (n = %d)", n); return NULL; }
    for (int i = 0; i < n; i++)
        if (!xs[i]) { tn__err_null("tn_stack", "input %d", i); return NULL; }
    int nd = xs[0]->type.ndim, ax = axis < 0 ? axis + nd + 1 : axis;
    if (ax < 0 || ax > nd || nd + 1 > TN_MAX_DIMS) {
        tn__err(TN_ERR_AXIS, "tn_stack: axis %d is out of range for inputs of %d dims", axis, nd);
        return NULL;
    }
    tn_var *stack_in[64], **ex = n <= 64 ? stack_in : (tn_var **)tn__malloc((size_t)n * sizeof *ex);
    if (!ex) { tn__err(TN_ERR_OOM, "tn_stack: out of memory"); return NULL; }
    tn_var *r = NULL;
    for (int i = 0; i < n; i++) {
        if (xs[i]->type.ndim != nd) {
            char s1[128], s2[128];
            tn__err(TN_ERR_SHAPE, "tn_stack: input %d has shape %s but input 0 has %s; all inputs need the same shape", i,
                    tn__shape_str(xs[i]->type.ndim, xs[i]->type.shape, s1), tn__shape_str(nd, xs[0]->type.shape, s2));
            goto done;
        }
        int pat[TN_MAX_DIMS];
        for (int k = 0, d = 0; k <= nd; k++) pat[k] = k == ax ? -1 : d++;
        if (!(ex[i] = tn_dimshuffle(xs[i], nd + 1, pat))) goto done;
    }
    r = tn_concatenate(n, ex, ax);
    if (!r && strncmp(tn_last_error(), "tn_stack", 8) != 0) tn__err(tn_last_result(), "tn_stack: %s", tn_last_error());
done:
    if (ex != stack_in) tn__free(ex);
    return r;
}

/* A weak literal (tn_scalar_const) that alloc or fill broadcasts takes
   dtype t here, once: the node's type must not hang on its input's flags,
   which rewrites do not keep (a dimshuffle of the literal, removed, would
   change it). */
static tn_var *tn__alloc_value(tn_var *value, tn_graph *g, tn_dtype t, const char *who) {
    if (!tn__ew_is_weak(value) || value->graph != g) return value;
    return tn__ew_typed_const(g, t, tn__ew_scalar_value(value->value), who);
}

TN_API tn_var *tn_alloc(tn_var *value, int ndim, const int64_t *shape) {
    if (!value) return tn__null_arg("tn_alloc", "value");
    tn_params p;
    if (!tn__shape_params("tn_alloc", ndim, shape, &p)) return NULL;
    if (!(value = tn__alloc_value(value, value->graph, tn_get_config()->floatX, "tn_alloc"))) return NULL;
    return tn__node(value->graph, TN_OP_ALLOC, 1, &value, &p, NULL, "tn_alloc");
}

TN_API tn_var *tn_fill(tn_var *like, tn_var *value) {
    if (!like) return tn__null_arg("tn_fill", "like");
    if (!value) return tn__null_arg("tn_fill", "value");
    if (!(value = tn__alloc_value(value, like->graph, like->type.dtype, "tn_fill"))) return NULL;
    tn_params p = tn__params_zero();
    tn__p_set_shape(&p, like->type.ndim, NULL);
    tn_var *in[2] = { value, like };
    return tn__node(like->graph, TN_OP_ALLOC, 2, in, &p, NULL, "tn_fill");
}

static tn_dtype tn__float_or_x(tn_dtype t) { return t == TN_DTYPE_NONE ? tn_get_config()->floatX : t; }

TN_API tn_var *tn_eye(tn_graph *g, tn_dtype t, int64_t n, int64_t m, int64_t k) {
    if (!g) return tn__null_arg("tn_eye", "graph");
    t = tn__float_or_x(t);
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_eye: invalid dtype %d", (int)t); return NULL; }
    if (m < 0) m = n;                                 /* NumPy's M=None */
    if (n < 0) { tn__err(TN_ERR_SHAPE, "tn_eye: n = %lld is negative", (long long)n); return NULL; }
    tn_params p = tn__params_zero();
    tn__p_set_eye(&p, t, n, m, k);
    return tn__node(g, TN_OP_EYE, 0, NULL, &p, NULL, "tn_eye");
}

/* One of tn_eye_var's sizes: a 0-d integer leaf, whose value the executor
   reads when it plans a call. */
static bool tn__eye_size_ok(tn_var *x, const char *what) {
    char tb[160];
    if (x->type.ndim != 0 || (x->type.dtype != TN_I32 && x->type.dtype != TN_I64)) {
        tn__err(TN_ERR_DTYPE, "tn_eye_var: %s ('%s') must be a 0-d int32 or int64 scalar, got %s", what, tn__var_label_name(x),
                tn__type_str(&x->type, tb));
        return false;
    }
    if (x->op != TN_OP_INPUT && x->op != TN_OP_SHARED && x->op != TN_OP_CONSTANT) {
        tn__err(TN_ERR_UNSUPPORTED, "tn_eye_var: %s ('%s') is computed in the graph (by %s); the result's shape is read from "
                "it before the graph runs, so it must be an input, a shared variable or a constant", what,
                tn__var_label_name(x), tn__op_def(x->op) ? tn__op_def(x->op)->name : "?");
        return false;
    }
    if (x->op == TN_OP_CONSTANT && x->value && x->value->device == TN_HOST && tn__load_i(x->type.dtype, x->value->data) < 0) {
        tn__err(TN_ERR_SHAPE, "tn_eye_var: %s ('%s') = %lld is negative", what, tn__var_label_name(x),
                (long long)tn__load_i(x->type.dtype, x->value->data));
        return false;
    }
    return true;
}

TN_API tn_var *tn_eye_var(tn_dtype t, tn_var *n, tn_var *m, tn_var *k) {
    if (!n) return tn__null_arg("tn_eye_var", "n");
    t = tn__float_or_x(t);
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_eye_var: invalid dtype %d", (int)t); return NULL; }
    if (!m) m = n;                                    /* NumPy's M=None */
    tn_graph *g = n->graph;
    char tb[160];
    if (!tn__eye_size_ok(n, "n") || !tn__eye_size_ok(m, "m")) return NULL;
    if (k && (k->type.ndim != 0 || (k->type.dtype != TN_I32 && k->type.dtype != TN_I64))) {
        tn__err(TN_ERR_DTYPE, "tn_eye_var: k ('%s') must be a 0-d int32 or int64 scalar, got %s", tn__var_label_name(k),
                tn__type_str(&k->type, tb));
        return NULL;
    }
    /* the kernels read k as int64 */
    if (!k) k = tn__ew_typed_const(g, TN_I64, 0, "tn_eye_var");
    else if (k->type.dtype != TN_I64 && k->graph == g) k = tn_cast(k, TN_I64);
    if (!k) return NULL;
    tn_params p = tn__params_zero();
    tn__p_set_eye(&p, t, -1, -1, 0);
    tn_var *in[3] = { n, m, k };
    return tn__node(g, TN_OP_EYE, 3, in, &p, NULL, "tn_eye_var");
}

TN_API tn_var *tn_arange(tn_graph *g, tn_dtype t, double start, double stop, double step) {
    if (!g) return tn__null_arg("tn_arange", "graph");
    t = tn__float_or_x(t);
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_arange: invalid dtype %d", (int)t); return NULL; }
    int64_t n;
    if (tn__arange_len("tn_arange", start, stop, step, &n) != TN_OK) return NULL;
    tn_params p = tn__params_zero();
    tn__p_set_arange(&p, t, start, stop, step);
    return tn__node(g, TN_OP_ARANGE, 0, NULL, &p, NULL, "tn_arange");
}

/* >>shape_grad ------------------------------------------------------------ */
/* Adjoints of the shape ops (views, copies) as shape ops again. Those that
   need sizes (reshape, flatten, slices with a step other than 1 or -1 whole,
   concatenate) need them known at build time where the message says so
   (TN_ERR_UNSUPPORTED otherwise). */

/* Reshape g to x's static shape (at most one unknown dim: it becomes -1). */
static tn_var *tn__shape_reshape_like(tn_var *g, tn_var *x, const char *what) {
    int64_t shape[TN_MAX_DIMS];
    int unknown = 0;
    char nb[64];
    for (int d = 0; d < x->type.ndim; d++) {
        shape[d] = x->type.shape[d];
        if (shape[d] < 0) unknown++;
    }
    if (unknown > 1) {
        char sb[128];
        tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of %s needs the shape of its input '%s', "
                "known only as %s (at most one unknown dim): give the input a static shape",
                what, tn__gname(x, nb), tn__shape_str(x->type.ndim, x->type.shape, sb));
        return NULL;
    }
    return tn_reshape(g, x->type.ndim, shape);
}

/* RESHAPE, FLATTEN: the gradient reshaped back. */
static tn_result tn__reshape_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    gin[0] = tn__shape_reshape_like(g, node->in[0], tn__op_def(node->op)->name);
    return gin[0] ? TN_OK : tn__gfail(tn__op_def(node->op)->name, node);
}

/* BROADCAST_TO, ALLOC: summed back over the broadcast dims (a fill's `like`
   only gives the shape: no gradient). */
static tn_result tn__bcast_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    gin[0] = tn__sum_to(g, &node->in[0]->type);
    return gin[0] ? TN_OK : tn__gfail(tn__op_def(node->op)->name, node);
}

static tn_result tn__dimshuffle_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *x = node->in[0];
    int on = node->type.ndim, xn = x->type.ndim, ax[TN_MAX_DIMS], na = 0, pos[TN_MAX_DIMS], pat[TN_MAX_DIMS];
    for (int d = 0; d < xn; d++) pos[d] = -1;
    for (int k = 0, kept = 0; k < on; k++) {   /* new 'x' dims are summed away */
        int src = tn__p_shuffle_src(&node->p, k);
        if (src < 0) ax[na++] = k;
        else pos[src] = kept++;
    }
    if (na) g = tn_sum(g, ax, na, false);
    for (int d = 0; d < xn; d++) pat[d] = pos[d];   /* dims the shuffle dropped come back as 'x' */
    bool ident = g && g->type.ndim == xn;
    for (int d = 0; ident && d < xn; d++) ident = pat[d] == d;
    gin[0] = ident ? g : tn_dimshuffle(g, xn, pat);
    return gin[0] ? TN_OK : tn__gfail("DimShuffle", node);
}

static tn_var *tn__shape_cat(int n, tn_var **xs, int axis) {
    tn_var *v[3];
    int k = 0;
    for (int i = 0; i < n; i++) if (xs[i]) v[k++] = xs[i];
    return k == 1 ? v[0] : tn_concatenate(k, v, axis);
}

/* The adjoint of slicing dim d: g (x sliced in dims <= d) padded with zeros
   along d back to the size of z (x sliced in dims < d only). */
static tn_var *tn__shape_unslice_dim(tn_var *g, tn_var *z, int d, int64_t start, int64_t stop, int64_t step) {
    int64_t n = z->type.shape[d];
    bool steps1 = step == TN_NONE || step == 1;
    if (start == TN_NONE && stop == TN_NONE && step == -1)   /* a whole reversal: its own adjoint, any size */
        return tn_slice(g, d, TN_NONE, TN_NONE, -1);
    if (n < 0 && steps1) {   /* size unknown: the pads are slices of zeros_like */
        tn_var *zz = tn__gzeros_like(z);
        tn_var *parts[3] = { start == TN_NONE ? NULL : tn_slice(zz, d, TN_NONE, start, 1), g,
                             stop == TN_NONE ? NULL : tn_slice(zz, d, stop, TN_NONE, 1) };
        return tn__shape_cat(3, parts, d);
    }
    if (n < 0) {
        char nb[64];
        tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of a slice with step %lld along dim %d needs the size "
                "of that dim of '%s' known at build time", (long long)step, d, tn__gname(z, nb));
        return NULL;
    }
    int64_t m;
    if (step == TN_NONE) step = 1;
    tn__slice_resolve(n, start, stop, step, &start, &m);
    tn_var *zz = tn__gzeros_like(z);
    if (m == 0) return zz;
    int64_t first = start, s = step;
    if (step < 0) {   /* reversed: the same positions in ascending order */
        g = tn_slice(g, d, TN_NONE, TN_NONE, -1);
        first = start + (m - 1) * step;
        s = -step;
    }
    if (s > 1 && m > 1) {   /* interleave s-1 zero blocks after each element */
        tn_var *zs[64], *zg = tn__gzeros_like(g);
        if (s > 64) {
            tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of a slice with step %lld (> 64) is not supported", (long long)step);
            return NULL;
        }
        zs[0] = g;
        for (int64_t k = 1; k < s; k++) zs[k] = zg;
        tn_var *st = tn_stack((int)s, zs, d + 1);
        if (!st || !g) return NULL;
        int64_t shape[TN_MAX_DIMS];
        int unknown = 0, nd = g->type.ndim;
        for (int k = 0; k < nd; k++) {
            shape[k] = k == d ? m * s : g->type.shape[k];
            if (shape[k] < 0) { shape[k] = -1; unknown++; }
        }
        if (unknown > 1) {
            char nb[64];
            tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of a slice with step %lld of '%s' needs its other dims "
                    "known at build time (at most one unknown)", (long long)step, tn__gname(z, nb));
            return NULL;
        }
        g = tn_slice(tn_reshape(st, nd, shape), d, 0, (m - 1) * s + 1, 1);
    }
    int64_t after = n - (first + (m - 1) * s + 1);
    tn_var *parts[3] = { first > 0 ? tn_slice(zz, d, 0, first, 1) : NULL, g,
                         after > 0 ? tn_slice(zz, d, 0, after, 1) : NULL };
    return tn__shape_cat(3, parts, d);
}

static tn_result tn__slice_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *x = node->in[0];
    int nd = x->type.ndim;
    for (int d = nd - 1; d >= 0 && g; d--) {
        if (tn__p_slice_whole(&node->p, d)) continue;
        int64_t a = tn__p_slice_start(&node->p, d), b = tn__p_slice_stop(&node->p, d), s = tn__p_slice_step(&node->p, d);
        /* z: x sliced as the node does in dims < d, whole in dims >= d */
        tn_params p = node->p;
        for (int k = d; k < nd; k++) tn__p_set_slice(&p, k, TN_NONE, TN_NONE, TN_NONE);
        bool whole = true;
        for (int k = 0; k < d; k++) whole = whole && tn__p_slice_whole(&p, k);
        tn_var *z = whole ? x : tn__node(x->graph, TN_OP_SLICE, 1, &x, &p, NULL, "tn_grad");
        if (!z) return tn__gfail("Slice", node);
        g = tn__shape_unslice_dim(g, z, d, a, b, s);
    }
    gin[0] = g;
    return g ? TN_OK : tn__gfail("Slice", node);
}

static tn_result tn__concat_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    int axis = tn__p_axis(&node->p), n = node->n_in;
    for (int j = 0; j < n; j++) {
        if (!need[j]) continue;
        int64_t pre = 0, post = 0, len = node->in[j]->type.shape[axis];
        bool pre_known = true, post_known = true;
        for (int k = 0; k < j; k++) { int64_t s = node->in[k]->type.shape[axis]; if (s < 0) pre_known = false; else pre += s; }
        for (int k = j + 1; k < n; k++) { int64_t s = node->in[k]->type.shape[axis]; if (s < 0) post_known = false; else post += s; }
        int64_t start = pre_known ? pre : (post_known && len >= 0) ? -(post + len) : INT64_MAX;
        int64_t stop = (pre_known && len >= 0) ? pre + len : post_known ? (post ? -post : TN_NONE) : INT64_MAX;
        if (start == INT64_MAX || stop == INT64_MAX) {
            char nb[64];
            return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of concatenate input %d ('%s') needs the sizes "
                           "along axis %d known at build time", j, tn__gname(node->in[j], nb), axis);
        }
        gin[j] = tn_slice(g, axis, start == 0 ? TN_NONE : start, stop, 1);
        if (!gin[j]) return tn__gfail("Concatenate", node);
    }
    return TN_OK;
}

/* Linear in every input: the concatenation of the tangents (zeros where an
   input has none). */
static tn_result tn__concat_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var **ins = (tn_var **)tn__graph_alloc(node->graph, sizeof(tn_var *) * (size_t)node->n_in);
    if (!ins) return tn__err(TN_ERR_OOM, "tn_rop: out of memory");
    for (int i = 0; i < node->n_in; i++) ins[i] = t[i] ? t[i] : tn__gzeros_like(node->in[i]);
    *out = tn__gclone(node, ins);
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

/* >>shape_rows: this part's rows of the op table (the >>ops_table section) --- */
/* Arange has no inputs: nothing to differentiate. Eye's inputs (tn_eye_var)
   are integers and its result does not change with them where it is
   defined: discrete, no gradient reaches them. */
#define TN__EYE_ROW \
    { .op = TN_OP_EYE, .name = "Eye", .kind = TN_OPK_SHAPE, .arity = -1, .infer = tn__infer_eye, .cpu = tn__cpu_eye, \
      .label = tn__label_eye, .flags = TN_OPF_DISCRETE | TN_OPF_HOST_VALUES, .value_inputs = tn__eye_value_inputs, .infer_values = tn__infer_eye_values },
#define TN__SHAPE_ROW(E, NAME, KIND, ARITY, OP, VJP, JVP, FLAGS) \
    { .op = TN_OP_##E, .name = NAME, .kind = KIND, .arity = ARITY, .infer = tn__infer_##OP, .cpu = tn__cpu_##OP, \
                    .label = tn__label_##OP, .vjp = VJP, .jvp = JVP, .flags = FLAGS },
#define TN__SHAPE_OP_ROWS \
    TN__SHAPE_ROW(RESHAPE,      "Reshape",     TN_OPK_SHAPE,  1, reshape,      tn__reshape_vjp,    NULL, TN_OPF_LINEAR) \
    TN__SHAPE_ROW(DIMSHUFFLE,   "DimShuffle",  TN_OPK_VIEW,   1, dimshuffle,   tn__dimshuffle_vjp, NULL, TN_OPF_LINEAR) \
    TN__SHAPE_ROW(SLICE,        "Subtensor",   TN_OPK_VIEW,   1, slice,        tn__slice_vjp,      NULL, TN_OPF_LINEAR) \
    TN__SHAPE_ROW(BROADCAST_TO, "BroadcastTo", TN_OPK_VIEW,   1, broadcast_to, tn__bcast_vjp,      NULL, TN_OPF_LINEAR) \
    TN__SHAPE_ROW(FLATTEN,      "Flatten",     TN_OPK_SHAPE,  1, flatten,      tn__reshape_vjp,    NULL, TN_OPF_LINEAR) \
    TN__SHAPE_ROW(CONCATENATE,  "Join",        TN_OPK_SHAPE, -1, concatenate,  tn__concat_vjp,     tn__concat_jvp, 0) \
    TN__SHAPE_ROW(ALLOC,        "Alloc",       TN_OPK_SHAPE, -1, alloc,        tn__bcast_vjp,      NULL, TN_OPF_LINEAR) \
    TN__SHAPE_ROW(ARANGE,       "ARange",      TN_OPK_SHAPE,  0, arange,       NULL,               NULL, 0) \
    TN__EYE_ROW

/* >>ops_index ========================================================= */
/* Indexing and sorting, NumPy's semantics (Theano's names in labels).

   ADV_SUBTENSOR, a gather: in x, k >= 1 index arrays (int32 or int64, any
   shapes). Two forms (tn__p_index_along):
     advanced  x[:, .., i_0, .., i_{k-1}, ..] with the index arrays on the
               consecutive axes axis .. axis+k-1, broadcast together; their
               broadcast shape B takes those axes' place: the output is
               x.shape[:axis] + B + x.shape[axis+k:] (tn_take is k = 1,
               tn_index any k);
     along     take_along_axis (k = 1): the index array has x's rank and
               broadcasts against x in the other dims; out[.., j, ..] =
               x[.., idx[.., j, ..], ..] along the axis.
   ADV_INC_SUBTENSOR, a scatter: in x, v, the index arrays, the same forms:
   the output is x with the gathered places set to (tn__p_index_set) or
   incremented by v broadcast to the gathered shape. Increments are applied
   one by one in C order, so repeated indices add up (np.add.at) and a set
   keeps the last; a float16 sum is rounded to float16 at every addition, as
   NumPy's. INC_SUBTENSOR: the same for x sliced by SLICE's params (a basic
   slice has no repeated places).

   Both run one plan (tn__iplan): the gathered shape, with for each of its
   dims the target's byte stride (0 on the index dims) and each index
   array's (0 where it broadcasts), and for each index array the target
   axis it indexes. Negative indices wrap once; an index still outside
   [0, n) fails the call naming the op, the index, the axis and n.

   GPU (tensor_cuda.h >>cuda_index): one thread per gathered element; an
   increment is an atomic add (float16 and bool through a 32-bit CAS loop),
   so repeated indices are added in no fixed order: float sums may differ in
   the last bits from run to run and from the CPU's; int sums are exact. A
   set with repeated indices keeps any one of them. The kernel never reads or
   writes outside its arrays: an index out of range is skipped and recorded
   in a device word, which the host reads back after the kernel (a wait on
   the stream) and reports as the CPU does. That wait keeps a function with
   a device gather or scatter from CUDA graph replay.

   ARGSORT: int64 indices of a stable sort along one axis (merge sort on the
   CPU: equal keys keep their order, NaN sorts last, -0 and +0 are equal),
   descending with tn__p_sort_desc (NaN first, equal keys still in index
   order), the first tn__p_sort_k of them kept (top_k). sort and top_k's
   values are take_along_axis of it, so their gradient is the scatter of g
   to the original places. */

/* >>index_plan ------------------------------------------------------------ */
typedef struct tn__iplan {
    int nd;                                   /* the gathered shape */
    int64_t shape[TN_MAX_DIMS];
    int64_t n;                                /* its elements */
    char *t;                                  /* the target: gathered from, or scattered into */
    int64_t ts[TN_MAX_DIMS];                  /* its byte strides by gathered dim (0 on index dims) */
    int k;                                    /* index arrays */
    const char *ip[TN_MAX_DIMS];
    bool i32[TN_MAX_DIMS];
    int64_t is[TN_MAX_DIMS][TN_MAX_DIMS];     /* their byte strides by gathered dim (0: broadcast) */
    int64_t as[TN_MAX_DIMS], an[TN_MAX_DIMS]; /* the target axis each indexes: byte stride, size */
    int ad[TN_MAX_DIMS];                      /* and its number */
} tn__iplan;

/* An index out of range: where (position in the gathered shape), which array, its value. */
typedef struct tn__ibad { int64_t pos, value; int j; } tn__ibad;

/* The index arrays' broadcast shape (static types: -1 unknown); false with
   the error set when they do not broadcast (NumPy's words). */
static bool tn__index_bshape(const char *who, int k, const tn_type *idx, int *nb, int64_t *B) {
    *nb = 0;
    for (int j = 0; j < k; j++) *nb = idx[j].ndim > *nb ? idx[j].ndim : *nb;
    for (int e = 0; e < *nb; e++) {
        int64_t s = 1;
        for (int j = 0; j < k; j++) {
            int id = e - (*nb - idx[j].ndim);
            int64_t t = id < 0 ? 1 : idx[j].shape[id];
            if (t == 1) continue;
            if (s == 1 || (s < 0 && t >= 0)) s = t;
            else if (t >= 0 && s >= 0 && t != s) {
                tn__sb m = TN__SB_INIT;
                for (int i = 0; i < k; i++) { char sb[128]; tn__sb_printf(&m, " %s", tn__shape_str(idx[i].ndim, idx[i].shape, sb)); }
                tn__err(TN_ERR_SHAPE, "%s: shape mismatch: indexing arrays could not be broadcast together with shapes%s", who, m.s ? m.s : "");
                tn__free(m.s);
                return false;
            }
        }
        B[e] = s;
    }
    return true;
}

/* The gathered type of x indexed by idx[0..k) in the node's form. */
static tn_result tn__index_type(const char *who, const tn_params *p, const tn_type *x, int k, const tn_type *idx, tn_type *out) {
    int axis = tn__p_index_axis(p);
    char s1[128], s2[128];
    for (int j = 0; j < k; j++)
        if (idx[j].dtype != TN_I32 && idx[j].dtype != TN_I64)
            return tn__err(TN_ERR_DTYPE, "%s: index array %d is %s; indices must be int32 or int64 (a boolean mask: use tn_where)",
                           who, j, tn_dtype_name(idx[j].dtype));
    out->dtype = x->dtype;
    if (tn__p_index_along(p)) {
        if (k != 1 || idx[0].ndim != x->ndim || axis < 0 || axis >= x->ndim)
            return tn__err(TN_ERR_SHAPE, "%s: indices of shape %s for x of shape %s along axis %d: take_along_axis needs "
                           "indices of x's rank", who, tn__shape_str(idx[0].ndim, idx[0].shape, s1),
                           tn__shape_str(x->ndim, x->shape, s2), axis);
        out->ndim = x->ndim;
        for (int d = 0; d < x->ndim; d++) {
            int64_t a = x->shape[d], b = idx[0].shape[d];
            if (d == axis) out->shape[d] = b;
            else if (a == 1 || (a < 0 && b >= 0 && b != 1)) out->shape[d] = b;
            else if (b == 1 || b < 0 || a == b) out->shape[d] = a;
            else
                return tn__err(TN_ERR_SHAPE, "%s: indices of shape %s do not broadcast against x of shape %s outside axis %d",
                               who, tn__shape_str(idx[0].ndim, idx[0].shape, s1), tn__shape_str(x->ndim, x->shape, s2), axis);
            out->bcast[d] = out->shape[d] == 1;
        }
        return TN_OK;
    }
    if (axis < 0 || axis + k > x->ndim)
        return tn__err(TN_ERR_AXIS, "%s: %d index array%s from axis %d do not fit x of shape %s", who, k, k == 1 ? "" : "s", axis,
                       tn__shape_str(x->ndim, x->shape, s1));
    int nb;
    int64_t B[TN_MAX_DIMS];
    if (!tn__index_bshape(who, k, idx, &nb, B)) return tn_last_result();
    if (x->ndim - k + nb > TN_MAX_DIMS)
        return tn__err(TN_ERR_SHAPE, "%s: the result would have %d dims (at most %d)", who, x->ndim - k + nb, TN_MAX_DIMS);
    out->ndim = 0;
    for (int d = 0; d < axis; d++) out->shape[out->ndim++] = x->shape[d];
    for (int e = 0; e < nb; e++) out->shape[out->ndim++] = B[e];
    for (int d = axis + k; d < x->ndim; d++) out->shape[out->ndim++] = x->shape[d];
    for (int d = 0; d < out->ndim; d++) out->bcast[d] = out->shape[d] == 1;
    return TN_OK;
}

/* The plan of target t (data, shape, strides of x or of the output it is
   copied to) indexed by idx[0..k) (host or device arrays: only shapes and
   strides are read here). The shapes have passed the type rule. */
static void tn__iplan_build(tn__iplan *P, const tn_params *p, char *t, int tnd, const int64_t *tsh, const int64_t *tst,
                            int k, tn_array *const *idx) {
    int axis = tn__p_index_axis(p);
    memset(P, 0, sizeof *P);
    P->t = t;
    P->k = k;
    for (int j = 0; j < k; j++) {
        P->ip[j] = (const char *)idx[j]->data;
        P->i32[j] = idx[j]->dtype == TN_I32;
        P->as[j] = tst[axis + (tn__p_index_along(p) ? 0 : j)];
        P->an[j] = tsh[axis + (tn__p_index_along(p) ? 0 : j)];
        P->ad[j] = axis + (tn__p_index_along(p) ? 0 : j);
    }
    if (tn__p_index_along(p)) {
        const tn_array *I = idx[0];
        P->nd = tnd;
        for (int d = 0; d < tnd; d++) {
            P->shape[d] = d == axis || tsh[d] == 1 ? I->shape[d] : tsh[d];
            P->ts[d] = d == axis || tsh[d] == 1 ? 0 : tst[d];
            P->is[0][d] = I->shape[d] == 1 ? 0 : I->strides[d];
        }
    } else {
        int nb = 0;
        for (int j = 0; j < k; j++) nb = idx[j]->ndim > nb ? idx[j]->ndim : nb;
        int D = 0;
        for (int d = 0; d < axis; d++, D++) { P->shape[D] = tsh[d]; P->ts[D] = tst[d]; }
        for (int e = 0; e < nb; e++, D++) {
            P->shape[D] = 1;
            for (int j = 0; j < k; j++) {
                int id = e - (nb - idx[j]->ndim);
                if (id < 0 || idx[j]->shape[id] == 1) continue;
                P->shape[D] = idx[j]->shape[id];
                P->is[j][D] = idx[j]->strides[id];
            }
        }
        for (int d = axis + k; d < tnd; d++, D++) { P->shape[D] = tsh[d]; P->ts[D] = tst[d]; }
        P->nd = D;
    }
    P->n = 1;
    for (int d = 0; d < P->nd; d++) P->n *= P->shape[d];
}

/* Byte offsets of positions [o0, o0 + cnt) of the gathered shape (C order)
   into the target (toff) and into an operand of byte strides ss (soff).
   False at the first index out of range (*bad says which). */
static bool tn__iplan_offsets(const tn__iplan *P, const int64_t *ss, int64_t o0, int cnt, int64_t *toff, int64_t *soff, tn__ibad *bad) {
    int64_t c[TN_MAX_DIMS], tb = 0, sb = 0, ib[TN_MAX_DIMS] = { 0 }, r = o0;
    int nd = P->nd;
    for (int d = nd - 1; d >= 0; d--) {
        c[d] = P->shape[d] ? r % P->shape[d] : 0;
        r = P->shape[d] ? r / P->shape[d] : 0;
        tb += c[d] * P->ts[d];
        sb += c[d] * ss[d];
        for (int j = 0; j < P->k; j++) ib[j] += c[d] * P->is[j][d];
    }
    for (int e = 0; e < cnt; e++) {
        int64_t off = tb;
        for (int j = 0; j < P->k; j++) {
            int64_t v = P->i32[j] ? *(const int32_t *)(const void *)(P->ip[j] + ib[j]) : *(const int64_t *)(const void *)(P->ip[j] + ib[j]);
            int64_t w = v < 0 ? v + P->an[j] : v;
            if (w < 0 || w >= P->an[j]) {
                bad->pos = o0 + e; bad->value = v; bad->j = j;
                return false;
            }
            off += w * P->as[j];
        }
        toff[e] = off;
        soff[e] = sb;
        for (int d = nd - 1; d >= 0; d--) {       /* the next position */
            tb += P->ts[d]; sb += ss[d];
            for (int j = 0; j < P->k; j++) ib[j] += P->is[j][d];
            if (++c[d] < P->shape[d] || d == 0) break;
            tb -= c[d] * P->ts[d]; sb -= c[d] * ss[d];
            for (int j = 0; j < P->k; j++) ib[j] -= c[d] * P->is[j][d];
            c[d] = 0;
        }
    }
    return true;
}

/* NumPy's IndexError, naming the op. */
static tn_result tn__ibad_err(const tn_var *node, const tn__iplan *P, const tn__ibad *b) {
    char lb[96];
    tn__op_def(node->op)->label(node, lb, sizeof lb);
    return tn__err(TN_ERR_INVALID, "%s: index %lld is out of bounds for axis %d with size %lld (index array %d, element %lld of the result)",
                   lb, (long long)b->value, P->ad[b->j], (long long)P->an[b->j], b->j, (long long)b->pos);
}

/* >>index_cpu ------------------------------------------------------------- */
#define TN__IDX_BATCH 256

typedef struct tn__gather_job {
    const tn__iplan *P;
    char *out;
    int64_t os[TN_MAX_DIMS];
    size_t es;
    int64_t run;                        /* elements along the last dim, contiguous on both sides (1: by elements) */
    TN__ATOMIC(int64_t) bad;            /* the first bad position found (INT64_MAX: none) */
} tn__gather_job;

/* *slot = min(*slot, pos): the first bad position any thread found */
static void tn__ibad_min(TN__ATOMIC(int64_t) *slot, int64_t pos) {
    int64_t cur = tn__atomic_load(slot);
    while (pos < cur && !tn__atomic_cas_weak(slot, &cur, pos)) {}
}
static void tn__gather_bad(tn__gather_job *J, const tn__ibad *b) { tn__ibad_min(&J->bad, b->pos); }

/* Runs lo..hi of J->run elements (a table's rows): the offsets once a run, one copy each. */
static void tn__gather_runs(void *ctx, int64_t lo, int64_t hi) {
    tn__gather_job *J = (tn__gather_job *)ctx;
    size_t bytes = (size_t)J->run * J->es;
    for (int64_t r = lo; r < hi; r++) {
        int64_t toff, soff;
        tn__ibad b;
        if (!tn__iplan_offsets(J->P, J->os, r * J->run, 1, &toff, &soff, &b)) { tn__gather_bad(J, &b); return; }
        memcpy(J->out + soff, J->P->t + toff, bytes);
    }
}

static void tn__gather_range(void *ctx, int64_t lo, int64_t hi) {
    tn__gather_job *J = (tn__gather_job *)ctx;
    int64_t toff[TN__IDX_BATCH], soff[TN__IDX_BATCH];
    for (int64_t o = lo; o < hi; o += TN__IDX_BATCH) {
        int cnt = (int)(hi - o < TN__IDX_BATCH ? hi - o : TN__IDX_BATCH);
        tn__ibad b;
        if (!tn__iplan_offsets(J->P, J->os, o, cnt, toff, soff, &b)) { tn__gather_bad(J, &b); return; }
        const char *t = J->P->t;
        char *y = J->out;
        switch (J->es) {
        case 1: for (int e = 0; e < cnt; e++) y[soff[e]] = t[toff[e]]; break;
        case 2: for (int e = 0; e < cnt; e++) *(uint16_t *)(void *)(y + soff[e]) = *(const uint16_t *)(const void *)(t + toff[e]); break;
        case 4: for (int e = 0; e < cnt; e++) *(uint32_t *)(void *)(y + soff[e]) = *(const uint32_t *)(const void *)(t + toff[e]); break;
        default: for (int e = 0; e < cnt; e++) *(uint64_t *)(void *)(y + soff[e]) = *(const uint64_t *)(const void *)(t + toff[e]); break;
        }
    }
}

static tn_result tn__cpu_adv_subtensor(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    tn__iplan P;
    tn__iplan_build(&P, &node->p, (char *)x->data, x->ndim, x->shape, x->strides, node->n_in - 1, in + 1);
    tn__gather_job J = { &P, (char *)out[0]->data, { 0 }, tn_dtype_size(x->dtype), 1, INT64_MAX };
    for (int d = 0; d < P.nd; d++) J.os[d] = out[0]->strides[d];
    if (P.n == 0) return TN_OK;
    int e = P.nd - 1;      /* the last dim not indexed and contiguous in the table and the output: rows copied whole */
    bool rows = e >= 0 && P.shape[e] > 1 && P.ts[e] == (int64_t)J.es && J.os[e] == (int64_t)J.es;
    for (int j = 0; rows && j < P.k; j++) rows = P.is[j][e] == 0;
    if (rows) {
        J.run = P.shape[e];
        tn__parallel_for(P.n / J.run, 65536 / J.run + 1, tn__gather_runs, &J);
    } else
        tn__parallel_for(P.n, 65536, tn__gather_range, &J);
    int64_t bad = tn__atomic_load(&J.bad);
    if (bad != INT64_MAX) {
        int64_t t1, s1;
        tn__ibad b = { bad, 0, 0 };
        tn__iplan_offsets(&P, J.os, bad, 1, &t1, &s1, &b);
        return tn__ibad_err(node, &P, &b);
    }
    return TN_OK;
}

/* y[toff] (op)= v[soff] for one batch; inc adds in y's dtype (wrapping ints,
   bool as or, float16 rounded at each addition). */
static void tn__scatter_batch(tn_dtype t, bool set, char *y, const char *v, const int64_t *toff, const int64_t *soff, int cnt) {
#define TN__SC_LOOP(T, EXPR) for (int e = 0; e < cnt; e++) { T *p_ = (T *)(void *)(y + toff[e]); T a_ = *(const T *)(const void *)(v + soff[e]); *p_ = (EXPR); }
    if (set) {
        switch (tn_dtype_size(t)) {
        case 1: TN__SC_LOOP(uint8_t, a_) break;
        case 2: TN__SC_LOOP(uint16_t, a_) break;
        case 4: TN__SC_LOOP(uint32_t, a_) break;
        default: TN__SC_LOOP(uint64_t, a_) break;
        }
        return;
    }
    switch (t) {
    case TN_BOOL: TN__SC_LOOP(uint8_t, (uint8_t)(*p_ | a_)) break;
    case TN_I32: TN__SC_LOOP(uint32_t, *p_ + a_) break;
    case TN_I64: TN__SC_LOOP(uint64_t, *p_ + a_) break;
    case TN_F16: TN__SC_LOOP(uint16_t, tn__ew_f2h(tn__ew_h2f(*p_) + tn__ew_h2f(a_))) break;
    case TN_F32: TN__SC_LOOP(float, *p_ + a_) break;
    default: TN__SC_LOOP(double, *p_ + a_) break;
    }
#undef TN__SC_LOOP
}

/* A scatter through one index array along the first indexed dim, with at
   most one dim after it (x[idx] op= v of a vector, or of rows): by owners.
   Each thread owns a range of the indexed axis, scans every index in order
   and applies the entries that fall in its range, so every element of y
   sees the same operations in the same order as on one thread (the same
   bits; the last of repeated sets wins). The indices are checked first, on
   all threads, so a bad one leaves y as it was. */
typedef struct tn__scatter_job {
    const tn__iplan *P;
    const char *v;
    int64_t vs[2];                      /* v's byte strides by gathered dim (0: broadcast) */
    tn_dtype dt;
    bool set;
    int64_t owners;
    TN__ATOMIC(int64_t) bad;            /* the first bad index entry (INT64_MAX: none) */
} tn__scatter_job;

static inline int64_t tn__scatter_index(const tn__iplan *P, int64_t i) {
    const char *p = P->ip[0] + i * P->is[0][0];
    return P->i32[0] ? *(const int32_t *)(const void *)p : *(const int64_t *)(const void *)p;
}

static void tn__scatter_check(void *ctx, int64_t lo, int64_t hi) {
    tn__scatter_job *J = (tn__scatter_job *)ctx;
    int64_t an = J->P->an[0];
    for (int64_t i = lo; i < hi; i++) {
        int64_t v = tn__scatter_index(J->P, i);
        if (v < -an || v >= an) { tn__ibad_min(&J->bad, i); return; }
    }
}

/* The entries i0.. i0+m-1 of the index array whose position lies in
   [w0, w0 + span): their entry numbers to ent and positions to pos (no
   branch on the test: the scan is what every owner repeats); how many. */
#define TN__SC_FIND(T)                                                                   \
    for (int64_t k = 0; k < m; k++) {                                                   \
        int64_t v_ = (int64_t)*(const T *)(const void *)(ip + (i0 + k) * is);           \
        int64_t w_ = v_ < 0 ? v_ + an : v_;                                              \
        ent[c] = i0 + k;                                                                 \
        pos[c] = w_;                                                                     \
        c += (uint64_t)(w_ - w0) < (uint64_t)span;                                       \
    }
static int tn__scatter_find(const tn__iplan *P, int64_t i0, int64_t m, int64_t w0, int64_t span, int64_t *ent, int64_t *pos) {
    const char *ip = P->ip[0];
    const int64_t is = P->is[0][0], an = P->an[0];
    int c = 0;
    if (P->i32[0]) TN__SC_FIND(int32_t)
    else TN__SC_FIND(int64_t)
    return c;
}
#undef TN__SC_FIND

static void tn__scatter_owned(void *ctx, int64_t lo, int64_t hi) {
    tn__scatter_job *J = (tn__scatter_job *)ctx;
    const tn__iplan *P = J->P;
    const int64_t an = P->an[0], len = P->nd == 2 ? P->shape[1] : 1, n = P->shape[0];
    const int64_t as = P->as[0], ts1 = P->ts[1], vs0 = J->vs[0], vs1 = J->vs[1];
    int64_t ent[TN__IDX_BATCH], pos[TN__IDX_BATCH], toff[TN__IDX_BATCH], soff[TN__IDX_BATCH];
    for (int64_t t = lo; t < hi; t++) {
        int64_t w0 = an * t / J->owners, w1 = an * (t + 1) / J->owners;
        int cnt = 0;
        for (int64_t i0 = 0; i0 < n; i0 += TN__IDX_BATCH) {
            int found = tn__scatter_find(P, i0, n - i0 < TN__IDX_BATCH ? n - i0 : TN__IDX_BATCH, w0, w1 - w0, ent, pos);
            for (int e = 0; e < found; e++)
                for (int64_t j = 0; j < len; j++) {
                    toff[cnt] = pos[e] * as + j * ts1;
                    soff[cnt] = ent[e] * vs0 + j * vs1;
                    if (++cnt == TN__IDX_BATCH) { tn__scatter_batch(J->dt, J->set, P->t, J->v, toff, soff, cnt); cnt = 0; }
                }
        }
        if (cnt) tn__scatter_batch(J->dt, J->set, P->t, J->v, toff, soff, cnt);
    }
}

/* Whether plan P scatters by owners: the form above, large, several
   threads, and v apart from y (no thread reads what another writes). */
static bool tn__scatter_by_owners(const tn__iplan *P, const tn_array *v, const tn_array *y) {
    if (P->k != 1 || P->nd < 1 || P->nd > 2 || P->ts[0] != 0 || (P->nd == 2 && P->is[0][1] != 0)) return false;
    if (P->n < ((int64_t)1 << 16) || tn__num_threads() < 2) return false;
    int64_t vl, vh, yl, yh;
    tn__array_span(v, &vl, &vh);
    tn__array_span(y, &yl, &yh);
    const char *v0 = (const char *)v->data, *y0 = (const char *)y->data;
    return v0 + vh <= y0 + yl || y0 + yh <= v0 + vl;
}

/* y = x (unless y is x's own buffer: in place), then the scatter of v by plan P (on y). */
static tn_result tn__scatter_run(const tn_var *node, const tn_array *x, const tn_array *v, tn_array *y, tn__iplan *P) {
    bool same = y->data == x->data;
    for (int d = 0; same && d < x->ndim; d++) same = y->strides[d] == x->strides[d];
    if (!same) tn__copy_strided(y->dtype, y->data, y->strides, x->dtype, x->data, x->strides, x->ndim, x->shape);
    int64_t vs[TN_MAX_DIMS], toff[TN__IDX_BATCH], soff[TN__IDX_BATCH];
    if (!tn__broadcast_strides(v, P->nd, P->shape, vs)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "%s: v of shape %s does not broadcast to the indexed shape %s", tn__op_def(node->op)->name,
                       tn__shape_str(v->ndim, v->shape, s1), tn__shape_str(P->nd, P->shape, s2));
    }
    bool set = node->op == TN_OP_INC_SUBTENSOR ? tn__p_incsub_set(&node->p) : tn__p_index_set(&node->p);
    if (tn__scatter_by_owners(P, v, y)) {
        tn__scatter_job J = { P, (const char *)v->data, { vs[0], P->nd == 2 ? vs[1] : 0 }, y->dtype, set, tn__num_threads(), INT64_MAX };
        tn__parallel_for(P->shape[0], 65536, tn__scatter_check, &J);
        int64_t bad = tn__atomic_load(&J.bad);
        if (bad != INT64_MAX) {
            tn__ibad b = { bad * (P->nd == 2 ? P->shape[1] : 1), tn__scatter_index(P, bad), 0 };
            return tn__ibad_err(node, P, &b);
        }
        tn__parallel_for(J.owners, 1, tn__scatter_owned, &J);
        return TN_OK;
    }
    for (int64_t o = 0; o < P->n; o += TN__IDX_BATCH) {
        int cnt = (int)(P->n - o < TN__IDX_BATCH ? P->n - o : TN__IDX_BATCH);
        tn__ibad b;
        if (!tn__iplan_offsets(P, vs, o, cnt, toff, soff, &b)) return tn__ibad_err(node, P, &b);
        tn__scatter_batch(y->dtype, set, P->t, (const char *)v->data, toff, soff, cnt);
    }
    return TN_OK;
}

static tn_result tn__cpu_adv_inc_subtensor(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_array *y = out[0];
    tn__iplan P;
    tn__iplan_build(&P, &node->p, (char *)y->data, y->ndim, y->shape, y->strides, node->n_in - 2, in + 2);
    return tn__scatter_run(node, in[0], in[1], y, &P);
}

/* The plan of a basic slice of y: no index arrays. */
static void tn__iplan_slice(tn__iplan *P, const tn_params *p, const tn_array *y) {
    memset(P, 0, sizeof *P);
    P->t = tn__slice_apply(p, y, P->shape, P->ts);
    P->nd = y->ndim;
    P->n = 1;
    for (int d = 0; d < P->nd; d++) P->n *= P->shape[d];
}

static tn_result tn__cpu_inc_subtensor(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__iplan P;
    tn__iplan_slice(&P, &node->p, out[0]);
    return tn__scatter_run(node, in[0], in[1], out[0], &P);
}

/* >>sort_cpu -------------------------------------------------------------- */
/* A bottom-up merge sort of the positions 0..n-1 of one line by key:
   stable (a run's left element goes first unless the right one sorts
   strictly before it). Keys are the values in double (floats: exact) or
   int64 (ints, bool). BEFORE(a, b): a sorts strictly before b. */
#define TN__SORT_LT(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))     /* NaN last */
#define TN__SORT_GT(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))     /* NaN first */
#define TN__SORT_LINE(NAME, KT, BEFORE) \
static int64_t *NAME(const KT *key, int64_t n, int64_t *a, int64_t *b) { \
    for (int64_t i = 0; i < n; i++) a[i] = i; \
    for (int64_t w = 1; w < n; w *= 2) { \
        for (int64_t lo = 0; lo < n; lo += 2 * w) { \
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo; \
            while (i < mid && j < hi) b[o++] = BEFORE(key[a[j]], key[a[i]]) ? a[j++] : a[i++]; \
            while (i < mid) b[o++] = a[i++]; \
            while (j < hi) b[o++] = a[j++]; \
        } \
        int64_t *t = a; a = b; b = t; \
    } \
    return a; \
}
TN__SORT_LINE(tn__sort_asc_f, double, TN__SORT_LT)
TN__SORT_LINE(tn__sort_desc_f, double, TN__SORT_GT)
TN__SORT_LINE(tn__sort_asc_i, int64_t, TN__SORT_LT)
TN__SORT_LINE(tn__sort_desc_i, int64_t, TN__SORT_GT)

typedef struct tn__sort_job {
    tn__cumplan L;                 /* the lines (tn__cum_plan_lines) */
    tn_dtype t;
    bool desc;
    int64_t k;                     /* indices written per line */
    TN__ATOMIC(int) oom;
} tn__sort_job;

static void tn__sort_range(void *ctx, int64_t lo, int64_t hi) {
    tn__sort_job *J = (tn__sort_job *)ctx;
    int64_t n = J->L.n;
    size_t need = (size_t)n * 24 + 64;
    char *mem = need <= TN__SCRATCH_BYTES ? tn__scratch() : (char *)tn__malloc(need);   /* long lines: their own block */
    if (!mem) { tn__atomic_store(&J->oom, 1); return; }
    int64_t *a = (int64_t *)(void *)tn__align64(mem), *b = a + n;
    void *key = b + n;
    bool fl = tn_dtype_is_float(J->t);
    for (int64_t o = lo; o < hi; o++) {
        int64_t xo, yo;
        tn__cum_line(&J->L, o, &xo, &yo);
        const char *x = J->L.x + xo;
        for (int64_t j = 0; j < n; j++) {
            const char *p = x + j * J->L.xs;
            switch (J->t) {
            case TN_BOOL: ((int64_t *)key)[j] = *(const uint8_t *)p; break;
            case TN_I32: ((int64_t *)key)[j] = *(const int32_t *)(const void *)p; break;
            case TN_I64: ((int64_t *)key)[j] = *(const int64_t *)(const void *)p; break;
            case TN_F16: ((double *)key)[j] = tn__ew_h2f(*(const uint16_t *)(const void *)p); break;
            case TN_F32: ((double *)key)[j] = *(const float *)(const void *)p; break;
            default: ((double *)key)[j] = *(const double *)(const void *)p; break;
            }
        }
        const int64_t *s = fl ? (J->desc ? tn__sort_desc_f : tn__sort_asc_f)((const double *)key, n, a, b)
                              : (J->desc ? tn__sort_desc_i : tn__sort_asc_i)((const int64_t *)key, n, a, b);
        char *y = J->L.y + yo;
        for (int64_t j = 0; j < J->k; j++) *(int64_t *)(void *)(y + j * J->L.ys) = s[j];
    }
    if (need > TN__SCRATCH_BYTES) tn__free(mem);
}

static tn_result tn__cpu_argsort(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int axis = tn__p_axis(&node->p);
    tn__sort_job J;
    memset(&J, 0, sizeof J);
    tn__cum_plan_lines(&J.L, x, out[0], axis);
    J.t = x->dtype;
    J.desc = tn__p_sort_desc(&node->p);
    J.k = out[0]->shape[axis];
    if (J.L.n == 0 || J.L.lines == 0 || J.k == 0) return TN_OK;
    tn__parallel_for(J.L.lines, 16384 / J.L.n + 1, tn__sort_range, &J);
    if (tn__atomic_load(&J.oom))
        return tn__err(TN_ERR_OOM, "%s: out of memory for the sort's scratch (lines of %lld)", tn__op_def(node->op)->name, (long long)J.L.n);
    return TN_OK;
}

/* >>index_cuda ---------------------------------------------------------------- */
/* The gather, scatter and sort kernels as CUDA C, for a back end that
   generates kernels (tensor_cuda.h's >>cuda_index section compiles them with
   NVRTC). tn_index: one thread per element of the gathered shape (a grid-
   stride loop), the plan tn__iplan as a struct of int64s passed by value
   (tn__cuda_iplan: ND dims and K index arrays are constants of the source,
   so its loops unroll into registers); mode 0 gathers, 1 sets, 2 adds
   (atomics; float16 and bool through a CAS or OR on their 32-bit word). An
   index out of range is skipped and recorded once in err[0..3] (1, the
   position, the value, the array). tn_sort_block sorts chunks of up to
   TN__SORT_CHUNK elements of each line in shared memory (bitonic, on the
   key then the position: the total order a stable sort gives),
   tn_sort_merge merges runs of width w (each element finds its place by a
   binary search in the other run), tn_sort_out keeps the first k of each
   line. Returns the length snprintf reports, or -1 for no kernel. */
#define TN__SORT_CHUNK 2048
typedef struct tn__cuda_iplan {
    int64_t n, t, s, err;                          /* elements; target, operand and error record addresses */
    int64_t shape[TN_MAX_DIMS], ts[TN_MAX_DIMS], ss[TN_MAX_DIMS];
    int64_t is[TN_MAX_DIMS][TN_MAX_DIMS], ip[TN_MAX_DIMS], i32[TN_MAX_DIMS], as[TN_MAX_DIMS], an[TN_MAX_DIMS];
} tn__cuda_iplan;

static const char tn__index_cuda_common[] = TN__CUDA_F16_SRC;

/* tn_index of mode, element type T (tname) and atomic add inc (mode 2). */
static int tn__index_cuda_text(int mode, const char *tname, const char *inc, int nd, int k, char *buf, size_t cap) {
    const char *op = mode == 0 ? "*(T *)s = *(const T *)p;" : mode == 1 ? "*(T *)p = *(const T *)s;" : NULL;
    return snprintf(buf, cap,
        "%s"
        "#define ND %d\n#define K %d\ntypedef %s T;\n"
        "struct tn_ip { long long n, t, s, err, shape[8], ts[8], ss[8], is[8][8], ip[8], i32[8], as[8], an[8]; };\n"
        "extern \"C\" __global__ void __launch_bounds__(256) tn_index(const tn_ip P) {\n"
        "    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < P.n; o += (long long)gridDim.x * blockDim.x) {\n"
        "        long long r = o, toff = 0, soff = 0, ioff[K > 0 ? K : 1];\n"
        "#pragma unroll\n"
        "        for (int j = 0; j < K; j++) ioff[j] = 0;\n"
        "#pragma unroll\n"
        "        for (int d = ND - 1; d >= 0; d--) {\n"
        "            long long c = r %% P.shape[d];\n"
        "            r /= P.shape[d];\n"
        "            toff += c * P.ts[d]; soff += c * P.ss[d];\n"
        "#pragma unroll\n"
        "            for (int j = 0; j < K; j++) ioff[j] += c * P.is[j][d];\n"
        "        }\n"
        "        bool ok = true;\n"
        "#pragma unroll\n"
        "        for (int j = 0; j < K; j++) {\n"
        "            const char *q = (const char *)P.ip[j] + ioff[j];\n"
        "            long long v = P.i32[j] ? (long long)*(const int *)q : *(const long long *)q;\n"
        "            long long w = v < 0 ? v + P.an[j] : v;\n"
        "            if (ok && (w < 0 || w >= P.an[j])) {\n"
        "                unsigned long long *e = (unsigned long long *)P.err;\n"
        "                if (atomicCAS(e, 0ull, 1ull) == 0ull) { e[1] = (unsigned long long)o; e[2] = (unsigned long long)v; e[3] = (unsigned long long)j; }\n"
        "                ok = false;\n"
        "            }\n"
        "            toff += w * P.as[j];\n"
        "        }\n"
        "        if (!ok) continue;\n"
        "        char *p = (char *)P.t + toff, *s = (char *)P.s + soff;\n"
        "        %s%s%s\n"
        "    }\n"
        "}\n",
        tn__index_cuda_common, nd, k, tname, op ? op : "{ T v = *(const T *)s; ", op ? "" : inc, op ? "" : " }");
}

/* A gather (mode 0) or set (mode 1) moving 16-byte units (uint4): a run
   of the innermost dim whose bytes and addresses are multiples of 16 moves
   as fewer, wider elements (tensor_cuda.h's tn__cuda_index_widen). */
TN_API int tn__index_cuda_source_wide(int mode, int nd, int k, char *buf, size_t cap) {
    if (mode < 0 || mode > 1 || nd < 1 || nd > TN_MAX_DIMS || k < 0 || k > TN_MAX_DIMS) return -1;
    return tn__index_cuda_text(mode, "uint4", NULL, nd, k, buf, cap);
}

TN_API int tn__index_cuda_source(int mode, tn_dtype t, int nd, int k, char *buf, size_t cap) {
    static const char *const st[TN_DTYPE_COUNT] = { NULL, "unsigned char", "unsigned int", "unsigned long long", "unsigned short", "unsigned int", "unsigned long long" };
    static const char *const inc[TN_DTYPE_COUNT] = { NULL,
        /* bool: or into the byte's word */
        "if (v) { unsigned long long a = (unsigned long long)p; atomicOr((unsigned int *)(a & ~3ull), 1u << ((a & 3ull) * 8)); }",
        "atomicAdd((unsigned int *)p, (unsigned int)v);",
        "atomicAdd((unsigned long long *)p, (unsigned long long)v);",
        /* float16: a CAS loop on the aligned word, rounded at each addition as the CPU */
        "unsigned long long a = (unsigned long long)p; unsigned int *w = (unsigned int *)(a & ~3ull); int sh = (int)(a & 2ull) * 8;"
        " unsigned int old = *w, as;"
        " do { as = old; unsigned short h = tn_f2h(tn_h2f((unsigned short)(as >> sh)) + tn_h2f(v));"
        " old = atomicCAS(w, as, (as & ~(0xffffu << sh)) | ((unsigned int)h << sh)); } while (as != old);",
        "atomicAdd((float *)p, __uint_as_float(v));",
        "atomicAdd((double *)p, __longlong_as_double((long long)v));" };
    if ((unsigned)t >= TN_DTYPE_COUNT || !st[t] || mode < 0 || mode > 2 || nd < 0 || nd > TN_MAX_DIMS || k < 0 || k > TN_MAX_DIMS) return -1;
    return tn__index_cuda_text(mode, st[t], inc[t], nd, k, buf, cap);
}

/* The sort kernels of dtype t (desc: descending). */
TN_API int tn__sort_cuda_source(tn_dtype t, bool desc, char *buf, size_t cap) {
    static const char *const xt[TN_DTYPE_COUNT] = { NULL, "unsigned char", "int", "long long", "unsigned short", "float", "double" };
    if ((unsigned)t >= TN_DTYPE_COUNT || !xt[t]) return -1;
    bool fl = tn_dtype_is_float(t);
    return snprintf(buf, cap,
        "%s"
        "#define CH %d\ntypedef %s XT;\ntypedef %s KT;\n"
        "__device__ __forceinline__ KT key(XT v) { return %s; }\n"
        /* a sorts strictly before b by key: NaN last (descending: first) */
        "__device__ __forceinline__ bool before(KT a, KT b) { return %s; }\n"
        /* the total order of a stable sort: key, then position */
        "__device__ __forceinline__ bool less(KT ka, long long ia, KT kb, long long ib) { return before(ka, kb) || (!before(kb, ka) && ia < ib); }\n"
        "__device__ __forceinline__ KT key_at(const XT *x, long long line, long long i, long long n, long long inner) {\n"
        "    long long o = line / inner; return key(x[(o * n + i) * inner + (line - o * inner)]); }\n"
        "extern \"C\" __global__ void __launch_bounds__(1024) tn_sort_block(const XT *__restrict__ x, long long *__restrict__ A, long long lines, long long n, long long inner, long long chunks) {\n"
        "    __shared__ KT sk[CH];\n"
        "    __shared__ int si[CH];\n"
        "    const long long line = blockIdx.x / chunks, lo = (blockIdx.x - line * chunks) * CH;\n"
        "    const int m = (int)(n - lo < CH ? n - lo : CH);\n"
        "    int p2 = 1;\n"
        "    while (p2 < m) p2 <<= 1;\n"
        "    for (int i = threadIdx.x; i < p2; i += blockDim.x) {\n"
        "        si[i] = i < m ? i : -1;\n"
        "        if (i < m) sk[i] = key_at(x, line, lo + i, n, inner);\n"
        "    }\n"
        "    for (int size = 2; size <= p2; size <<= 1)\n"
        "        for (int stride = size >> 1; stride > 0; stride >>= 1) {\n"
        "            __syncthreads();\n"
        "            for (int i = threadIdx.x; i < p2; i += blockDim.x) {\n"
        "                int j = i ^ stride;\n"
        "                if (j <= i) continue;\n"
        "                int a = (i & size) == 0 ? j : i, b = (i & size) == 0 ? i : j;   /* swap when a sorts before b */\n"
        "                bool sw = si[a] >= 0 && (si[b] < 0 || less(sk[a], si[a], sk[b], si[b]));\n"
        "                if (sw) { KT tk = sk[i]; sk[i] = sk[j]; sk[j] = tk; int ti = si[i]; si[i] = si[j]; si[j] = ti; }\n"
        "            }\n"
        "        }\n"
        "    __syncthreads();\n"
        "    for (int i = threadIdx.x; i < m; i += blockDim.x) A[line * n + lo + i] = lo + si[i];\n"
        "}\n"
        "extern \"C\" __global__ void __launch_bounds__(256) tn_sort_merge(const XT *__restrict__ x, const long long *__restrict__ A, long long *__restrict__ B, long long lines, long long n, long long inner, long long w) {\n"
        "    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (g >= lines * n) return;\n"
        "    const long long line = g / n, p = g - line * n, run = p / w, start = run * w, base = line * n;\n"
        "    const bool left = (run & 1) == 0;\n"
        "    long long olo = left ? start + w : start - w, ohi = left ? olo + w : start;\n"
        "    if (olo > n) olo = n;\n"
        "    if (ohi > n) ohi = n;\n"
        "    const long long e = A[base + p];\n"
        "    const KT ke = key_at(x, line, e, n, inner);\n"
        "    long long lo = olo, hi = ohi;\n"
        "    while (lo < hi) {\n"
        "        long long mid = (lo + hi) >> 1, f = A[base + mid];\n"
        "        if (less(key_at(x, line, f, n, inner), f, ke, e)) lo = mid + 1; else hi = mid;\n"
        "    }\n"
        "    B[base + (left ? start : olo) + (p - start) + (lo - olo)] = e;\n"
        "}\n"
        "extern \"C\" __global__ void __launch_bounds__(256) tn_sort_out(const long long *__restrict__ A, long long *__restrict__ y, long long lines, long long n, long long inner, long long k) {\n"
        "    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (g >= lines * k) return;\n"
        "    const long long line = g / k, j = g - line * k, o = line / inner;\n"
        "    y[(o * k + j) * inner + (line - o * inner)] = A[line * n + j];\n"
        "}\n",
        tn__index_cuda_common, TN__SORT_CHUNK, xt[t], fl ? "double" : "long long",
        t == TN_F16 ? "(double)tn_h2f(v)" : fl ? "(double)v" : "(long long)v",
        !desc ? "a < b || (b != b && a == a)" : "a > b || (a != a && b == b)");
}

/* >>index_infer_label ------------------------------------------------------- */
static tn_result tn__index_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const char *who = tn__op_def(node->op)->name;
    char s1[128], s2[128];
    switch (node->op) {
    case TN_OP_ADV_SUBTENSOR:
        return tn__index_type(who, &node->p, &in[0], node->n_in - 1, in + 1, out);
    case TN_OP_ADV_INC_SUBTENSOR: case TN_OP_INC_SUBTENSOR: {
        tn_type g;
        tn_result r = node->op == TN_OP_INC_SUBTENSOR ? tn__infer_slice(node, in, &g)
                                                      : tn__index_type(who, &node->p, &in[0], node->n_in - 2, in + 2, &g);
        if (r != TN_OK) return r;
        const tn_type *v = &in[1];
        if (v->dtype != in[0].dtype)
            return tn__err(TN_ERR_DTYPE, "%s: v is %s, x %s", who, tn_dtype_name(v->dtype), tn_dtype_name(in[0].dtype));
        bool ok = v->ndim <= g.ndim;
        for (int d = 0; ok && d < v->ndim; d++) {
            int64_t a = v->shape[d], b = g.shape[g.ndim - v->ndim + d];
            ok = a == 1 || a < 0 || b < 0 || a == b;
        }
        if (!ok)
            return tn__err(TN_ERR_SHAPE, "%s: v of shape %s does not broadcast to the indexed shape %s", who,
                           tn__shape_str(v->ndim, v->shape, s1), tn__shape_str(g.ndim, g.shape, s2));
        *out = in[0];
        return TN_OK;
    }
    default: {   /* ARGSORT */
        int axis = tn__p_axis(&node->p);
        int64_t k = tn__p_sort_k(&node->p);
        if (axis < 0 || axis >= in[0].ndim)
            return tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for an input of shape %s", who, axis, tn__shape_str(in[0].ndim, in[0].shape, s1));
        *out = in[0];
        out->dtype = TN_I64;
        if (k >= 0) {
            if (in[0].shape[axis] >= 0 && k > in[0].shape[axis])
                return tn__err(TN_ERR_SHAPE, "%s: k = %lld is larger than axis %d of shape %s", who, (long long)k, axis,
                               tn__shape_str(in[0].ndim, in[0].shape, s1));
            out->shape[axis] = k;
            out->bcast[axis] = k == 1;
        }
        return TN_OK;
    }
    }
}

/* AdvancedSubtensor1 (take on axis 0), AdvancedSubtensor{axis=1},
   TakeAlongAxis{axis=1}; AdvancedIncSubtensor1{no_inplace,set};
   IncSubtensor{Inc;::, 1:3:}; ArgSort{axis=1}, TopK{axis=1, k=3} */
static void tn__index_label(const tn_var *node, char *buf, size_t cap) {
    tn__sbuf b = { buf, cap, 0 };
    const tn_params *p = &node->p;
    switch (node->op) {
    case TN_OP_ADV_SUBTENSOR: case TN_OP_ADV_INC_SUBTENSOR: {
        int k = node->n_in - (node->op == TN_OP_ADV_SUBTENSOR ? 1 : 2);
        const char *base = node->op == TN_OP_ADV_SUBTENSOR ? "Subtensor" : "IncSubtensor";
        if (tn__p_index_along(p)) tn__sbuf_put(&b, "TakeAlongAxis%s{axis=%d", node->op == TN_OP_ADV_SUBTENSOR ? "" : "Inc", tn__p_index_axis(p));
        else if (k == 1 && tn__p_index_axis(p) == 0) tn__sbuf_put(&b, "Advanced%s1", base);
        else tn__sbuf_put(&b, "Advanced%s{axis=%d", base, tn__p_index_axis(p));
        bool braces = tn__p_index_along(p) || k != 1 || tn__p_index_axis(p) != 0;
        if (node->op == TN_OP_ADV_INC_SUBTENSOR)
            tn__sbuf_put(&b, "%s%s,%s", braces ? ", " : "{", node->inplace ? "inplace" : "no_inplace", tn__p_index_set(p) ? "set" : "inc");
        if (braces || node->op == TN_OP_ADV_INC_SUBTENSOR) tn__sbuf_put(&b, "}");
        return;
    }
    case TN_OP_INC_SUBTENSOR:
        tn__sbuf_put(&b, "IncSubtensor{%s%s;", node->inplace ? "Inplace" : "", tn__p_incsub_set(p) ? "Set" : "Inc");
        tn__slice_text(node, &b);
        tn__sbuf_put(&b, "}");
        return;
    default:
        if (tn__p_sort_k(p) >= 0) tn__sbuf_put(&b, "TopK{axis=%d, k=%lld}", tn__p_axis(p), (long long)tn__p_sort_k(p));
        else tn__sbuf_put(&b, "ArgSort{axis=%d%s}", tn__p_axis(p), tn__p_sort_desc(p) ? ", descending" : "");
        return;
    }
}

/* >>index_constructors ------------------------------------------------------ */
static tn_var *tn__index_make(const char *who, int op, tn_var *x, tn_var *v, int axis, bool along, bool set, int k, tn_var *const *idx) {
    tn_var *ins[2 + TN_MAX_DIMS];
    int n = 0;
    if (!x) return tn__null_arg(who, "x");
    if (k < 1 || k > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "%s: %d index arrays (1 to %d)", who, k, TN_MAX_DIMS); return NULL; }
    if (!idx) return tn__null_arg(who, "indices");
    ins[n++] = x;
    if (op == TN_OP_ADV_INC_SUBTENSOR) {
        if (!v) return tn__null_arg(who, "v");
        if (v->type.dtype != x->type.dtype && !(v = tn_cast(v, x->type.dtype))) return NULL;
        ins[n++] = v;
    }
    for (int j = 0; j < k; j++) {
        if (!idx[j]) { tn__err_null(who, "indices[%d]", j); return NULL; }
        if (idx[j]->graph != x->graph) { tn__err(TN_ERR_GRAPH, "%s: indices[%d] and x belong to different graphs", who, j); return NULL; }
        ins[n++] = idx[j];
    }
    int nd = x->type.ndim;
    if (axis < -nd || axis >= nd) {
        char sb[128];
        tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for '%s' of shape %s", who, axis, tn__var_nm(x), tn__shape_str(nd, x->type.shape, sb));
        return NULL;
    }
    tn_params p = tn__params_zero();
    tn__p_set_index(&p, axis < 0 ? axis + nd : axis, along, set);
    return tn__node(x->graph, op, n, ins, &p, NULL, who);
}

TN_API tn_var *tn_take(tn_var *x, tn_var *indices, int axis) {
    return tn__index_make("tn_take", TN_OP_ADV_SUBTENSOR, x, NULL, axis, false, false, 1, &indices);
}
TN_API tn_var *tn_take_along_axis(tn_var *x, tn_var *indices, int axis) {
    return tn__index_make("tn_take_along_axis", TN_OP_ADV_SUBTENSOR, x, NULL, axis, true, false, 1, &indices);
}
TN_API tn_var *tn_index(tn_var *x, int axis, int n, tn_var *const *indices) {
    return tn__index_make("tn_index", TN_OP_ADV_SUBTENSOR, x, NULL, axis, false, false, n, indices);
}

/* set/inc of sub: a gather's indices, or a chain of slices (one per axis) merged into one. */
static tn_var *tn__incsub_make(const char *who, tn_var *sub, tn_var *v, bool set) {
    if (!sub) return tn__null_arg(who, "sub");
    if (!v) return tn__null_arg(who, "v");
    if (sub->op == TN_OP_ADV_SUBTENSOR)
        return tn__index_make(who, TN_OP_ADV_INC_SUBTENSOR, sub->in[0], v, tn__p_index_axis(&sub->p), tn__p_index_along(&sub->p), set,
                              sub->n_in - 1, sub->in + 1);
    if (sub->op != TN_OP_SLICE) {
        char lb[96];
        tn__op_def(sub->op) && tn__op_def(sub->op)->label ? tn__op_def(sub->op)->label(sub, lb, sizeof lb) : (void)snprintf(lb, sizeof lb, "a leaf");
        tn__err(TN_ERR_INVALID, "%s: sub ('%s', %s) is not x indexed by tn_slice, tn_take, tn_index or tn_take_along_axis", who,
                tn__var_nm(sub), lb);
        return NULL;
    }
    tn_params p = tn__params_zero();
    tn__p_set_slice_whole(&p);
    tn_var *x = sub;
    for (; x->op == TN_OP_SLICE; x = x->in[0]) {
        for (int d = 0; d < x->type.ndim; d++) {
            if (tn__p_slice_whole(&x->p, d)) continue;
            if (!tn__p_slice_whole(&p, d)) {
                tn__err(TN_ERR_INVALID, "%s: axis %d of sub is sliced twice; slice each axis once", who, d);
                return NULL;
            }
            tn__p_set_slice(&p, d, tn__p_slice_start(&x->p, d), tn__p_slice_stop(&x->p, d), tn__p_slice_step(&x->p, d));
        }
    }
    if (v->type.dtype != x->type.dtype && !(v = tn_cast(v, x->type.dtype))) return NULL;
    if (v->graph != x->graph) { tn__err(TN_ERR_GRAPH, "%s: v and sub belong to different graphs", who); return NULL; }
    tn__p_set_incsub_set(&p, set);
    tn_var *ins[2] = { x, v };
    return tn__node(x->graph, TN_OP_INC_SUBTENSOR, 2, ins, &p, NULL, who);
}
TN_API tn_var *tn_set_subtensor(tn_var *sub, tn_var *v) { return tn__incsub_make("tn_set_subtensor", sub, v, true); }
TN_API tn_var *tn_inc_subtensor(tn_var *sub, tn_var *v) { return tn__incsub_make("tn_inc_subtensor", sub, v, false); }

TN_API tn_var *tn_one_hot(tn_var *labels, int64_t n, tn_dtype t) {
    if (!labels) return tn__null_arg("tn_one_hot", "labels");
    if (tn_dtype_is_float(labels->type.dtype) || labels->type.dtype == TN_BOOL) {
        tn__err(TN_ERR_DTYPE, "tn_one_hot: labels '%s' are %s; they must be int32 or int64", tn__var_nm(labels), tn_dtype_name(labels->type.dtype));
        return NULL;
    }
    if (n < 0) { tn__err(TN_ERR_INVALID, "tn_one_hot: n = %lld is negative", (long long)n); return NULL; }
    int nd = labels->type.ndim, pat[TN_MAX_DIMS];
    if (nd + 1 > TN_MAX_DIMS) { tn__err(TN_ERR_SHAPE, "tn_one_hot: labels have %d dims (at most %d)", nd, TN_MAX_DIMS - 1); return NULL; }
    for (int d = 0; d < nd; d++) pat[d] = d;
    pat[nd] = -1;
    tn_var *cls = tn_arange(labels->graph, labels->type.dtype, 0, (double)n, 1);
    tn_var *hot = tn_eq(tn_dimshuffle(labels, nd + 1, pat), cls);
    if (!hot) { tn__err_in("tn_one_hot", tn_last_result()); return NULL; }
    return tn_cast(hot, t ? t : tn_get_config()->floatX);
}

static tn_var *tn__argsort_make(const char *who, tn_var *x, int axis, bool desc, int64_t k) {
    if (!x) return tn__null_arg(who, "x");
    int nd = x->type.ndim;
    if (axis < -nd || axis >= nd) {
        char sb[128];
        tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for '%s' of shape %s", who, axis, tn__var_nm(x), tn__shape_str(nd, x->type.shape, sb));
        return NULL;
    }
    tn_params p = tn__params_zero();
    tn__p_set_sort(&p, axis < 0 ? axis + nd : axis, desc, k);
    return tn__node(x->graph, TN_OP_ARGSORT, 1, &x, &p, NULL, who);
}
TN_API tn_var *tn_argsort(tn_var *x, int axis) { return tn__argsort_make("tn_argsort", x, axis, false, -1); }
TN_API tn_var *tn_sort(tn_var *x, int axis) {
    tn_var *i = tn__argsort_make("tn_sort", x, axis, false, -1);
    return i ? tn__index_make("tn_sort", TN_OP_ADV_SUBTENSOR, x, NULL, axis, true, false, 1, &i) : NULL;
}
TN_API tn_result tn_top_k(tn_var *x, int64_t k, int axis, tn_var **values, tn_var **indices) {
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (k < 0) return tn__err(TN_ERR_INVALID, "tn_top_k: k = %lld is negative", (long long)k);
    tn_var *i = tn__argsort_make("tn_top_k", x, axis, true, k);
    tn_var *v = i && values ? tn__index_make("tn_top_k", TN_OP_ADV_SUBTENSOR, x, NULL, axis, true, false, 1, &i) : i;
    if (!v) return tn_last_result();
    if (values) *values = v;
    if (indices) *indices = i;
    return TN_OK;
}

/* >>index_grad ---------------------------------------------------------------- */
/* A gather's gradient is the scatter-add of g into zeros; a scatter's: g
   (zero where set overwrote x) to x, g gathered to v. */
static tn_result tn__adv_subtensor_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *x = node->in[0];
    gin[0] = tn__index_make("tn_grad", TN_OP_ADV_INC_SUBTENSOR, tn__gzeros_like(x), g, tn__p_index_axis(&node->p),
                            tn__p_index_along(&node->p), false, node->n_in - 1, node->in + 1);
    return gin[0] ? TN_OK : tn__gfail("AdvancedSubtensor", node);
}

static tn_result tn__adv_inc_subtensor_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    int axis = tn__p_index_axis(&node->p), k = node->n_in - 2;
    bool along = tn__p_index_along(&node->p);
    if (need[0])
        gin[0] = !tn__p_index_set(&node->p) ? g
               : tn__index_make("tn_grad", TN_OP_ADV_INC_SUBTENSOR, g, tn_lit(g, 0.0), axis, along, true, k, node->in + 2);
    if (need[1])     /* v broadcast to the places: summed back to its own shape */
        gin[1] = tn__sum_to(tn__index_make("tn_grad", TN_OP_ADV_SUBTENSOR, g, NULL, axis, along, false, k, node->in + 2), &node->in[1]->type);
    return (!need[0] || gin[0]) && (!need[1] || gin[1]) ? TN_OK : tn__gfail("AdvancedIncSubtensor", node);
}

static tn_result tn__inc_subtensor_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    tn_params p = node->p;
    tn__p_set_incsub_set(&p, false);        /* SLICE's params alone */
    if (need[0]) {
        tn_var *ins[2] = { g, tn__glit(g, g->type.dtype, 0.0) };
        tn__p_set_incsub_set(&p, true);
        gin[0] = !tn__p_incsub_set(&node->p) ? g : ins[1] ? tn__node(g->graph, TN_OP_INC_SUBTENSOR, 2, ins, &p, NULL, "tn_grad") : NULL;
        tn__p_set_incsub_set(&p, false);
    }
    if (need[1]) gin[1] = tn__sum_to(tn__node(g->graph, TN_OP_SLICE, 1, &g, &p, NULL, "tn_grad"), &node->in[1]->type);
    return (!need[0] || gin[0]) && (!need[1] || gin[1]) ? TN_OK : tn__gfail("IncSubtensor", node);
}

/* Linear in x and v together: the op of their tangents (zeros where none). */
static tn_result tn__incsub_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var *ins[2 + TN_MAX_DIMS];
    if (!t[0] && !t[1]) return TN_OK;
    for (int i = 0; i < node->n_in; i++) ins[i] = node->in[i];
    ins[0] = t[0] ? t[0] : tn__gzeros_like(node->in[0]);
    ins[1] = t[1] ? t[1] : tn__gzeros_like(node->in[1]);
    for (int i = 0; i < 2; i++)
        if (ins[i] && ins[i]->type.dtype != node->in[i]->type.dtype) ins[i] = tn_cast(ins[i], node->in[i]->type.dtype);
    *out = ins[0] && ins[1] ? tn__gclone(node, ins) : NULL;
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

/* >>index_rows: this part's rows of the op table (the >>ops_table section) --- */
/* TN_OPK_OTHER; the GPU runs them through their rows of the CUDA table
   (tensor_cuda.h >>cuda_index). A scatter may write into x's buffer (inplace). */
#define TN__INDEX_OP_ROWS \
    { .op = TN_OP_ADV_SUBTENSOR, .name = "AdvancedSubtensor", .kind = TN_OPK_OTHER, .arity = -1, .infer = tn__index_infer, \
                              .cpu = tn__cpu_adv_subtensor, .label = tn__index_label, .vjp = tn__adv_subtensor_vjp, .flags = TN_OPF_LINEAR }, \
    { .op = TN_OP_ADV_INC_SUBTENSOR, .name = "AdvancedIncSubtensor", .kind = TN_OPK_OTHER, .arity = -1, .infer = tn__index_infer, \
                                  .cpu = tn__cpu_adv_inc_subtensor, .label = tn__index_label, .vjp = tn__adv_inc_subtensor_vjp, \
                                  .jvp = tn__incsub_jvp, .flags = TN_OPF_INPLACE_ACC }, \
    { .op = TN_OP_INC_SUBTENSOR, .name = "IncSubtensor", .kind = TN_OPK_OTHER, .arity = 2, .infer = tn__index_infer, \
                              .cpu = tn__cpu_inc_subtensor, .label = tn__index_label, .vjp = tn__inc_subtensor_vjp, \
                              .jvp = tn__incsub_jvp, .flags = TN_OPF_INPLACE_ACC }, \
    { .op = TN_OP_ARGSORT, .name = "ArgSort", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__index_infer, .cpu = tn__cpu_argsort, \
                        .label = tn__index_label, .flags = TN_OPF_DISCRETE },

/* >>ops_random ======================================================== */
/* Random draws (the >>api_random section): one op, RANDOM, whose inputs are
   its stream's seed and call count (0-d int64 views of the state [seed,
   calls]) and, for a _like draw, a variable whose shape it takes. A _like
   draw is also a member the fusion pass may put into an elementwise kernel
   (a TN_OP_RANDOM instruction, tn_ew_rand): element e of the kernel's draw
   is element e of the op's, so fusing changes no bit. Elements are drawn
   in blocks of a Philox-4x32-10 call (four 32-bit words): block j of draw
   d at call c has the counter
   (j mod 2^32, j / 2^32, d, c mod 2^32) and the key (seed mod 2^32, seed / 2^32).
   Element i of a block of `per` elements is t = i mod per of block i / per:
     uniform float32: per 4, word t >> 8 times 2^-24, then fmaf(u, high - low, low)
                      (both parameters rounded to float32 first); float16: the
                      same with word t >> 21 (11 bits) and rounded to float16 at the end
     uniform float64: per 2, 53 bits of words 2t, 2t+1, fma(u, high - low, low)
     normal float64:  per 2, u1 = (53 bits of words 0, 1) + 1, times 2^-53, in (0, 1],
                      u2 = 53 bits of words 2, 3 times 2^-53; r = sqrt(-2 log u1);
                      element t = 0 takes r cos(2 pi u2), t = 1 r sin(2 pi u2);
                      fma(std, z, mean)
     normal float32/16: per 4, in float32 arithmetic (float16 rounded at the
                      end): pair h (elements 2h, 2h + 1) of words 2h, 2h + 1:
                      u1 = fmaf(word, 2^-32, 2^-33) in (0, 1] (|z| up to 6.8),
                      u2 = (word >> 8) times 2^-24; r cos, then r sin, as above;
                      fmaf(std, z, mean) with both parameters rounded to float32
     bernoulli:       per 2, (53 bits of words 2t, 2t+1) * 2^-53 < p
     randint:         per 2, low + the high 64 bits of (words 2t, 2t+1 as 64 bits) * (high - low)
   log, sin and cos are the library's own (below: fma-only polynomials after an
   exact reduction), so the generated CUDA kernel, compiled from the same text,
   gives the CPU's bits; fma is explicit wherever a compiler could contract. */

/* One Philox round on the counter words c0..c3 under key k0, k1 (the one
   definition, for one block and for the CPU's 16 at once). */
#define TN__PHILOX_ROUND(c0, c1, c2, c3, k0, k1) { \
        uint64_t p0_ = (uint64_t)0xD2511F53u * (c0), p1_ = (uint64_t)0xCD9E8D57u * (c2); \
        uint32_t n0_ = (uint32_t)(p1_ >> 32) ^ (c1) ^ (k0), n2_ = (uint32_t)(p0_ >> 32) ^ (c3) ^ (k1); \
        (c0) = n0_; (c1) = (uint32_t)p1_; (c2) = n2_; (c3) = (uint32_t)p0_; }
/* cos and sin of k quarter turns plus an angle whose cos and sin are cs and
   sn: an odd k swaps them, k = 1, 2 flips cos's sign and k = 2, 3 sin's (UT:
   T's bits; a sign flip is exact, -0 included). */
#define TN__RND_QUARTER(T, UT, k, cs, sn, cosine, sine) { \
        T a_ = (k) & 1 ? (sn) : (cs), b_ = (k) & 1 ? (cs) : (sn); \
        UT ab_, bb_; \
        memcpy(&ab_, &a_, sizeof ab_); \
        memcpy(&bb_, &b_, sizeof bb_); \
        ab_ ^= (UT)(((k) + 1) & 2) << (8 * sizeof(UT) - 2); \
        bb_ ^= (UT)((k) & 2) << (8 * sizeof(UT) - 2); \
        memcpy(cosine, &ab_, sizeof ab_); \
        memcpy(sine, &bb_, sizeof bb_); }
#define TN__RANDOM_SOURCE(QUAL) \
    QUAL void tn__philox10(uint32_t k0, uint32_t k1, uint32_t *c) { \
        for (int r = 0; r < 10; r++) { \
            if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; } \
            TN__PHILOX_ROUND(c[0], c[1], c[2], c[3], k0, k1) } } \
    QUAL double tn__rnd_u53(uint32_t lo, uint32_t hi) { \
        return (double)((((uint64_t)hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0); } \
    QUAL double tn__rnd_small_d(int64_t i) {   /* (double)i for |i| < 2^51, exactly: the bits of 1.5 * 2^52 + i */ \
        uint64_t b = 0x4338000000000000ull + (uint64_t)i; \
        double d; \
        memcpy(&d, &b, sizeof d); \
        return d - 6755399441055744.0; } \
    QUAL float tn__rnd_small_f(int32_t i) {   /* (float)i for |i| < 2^22, exactly: the bits of 1.5 * 2^23 + i */ \
        uint32_t b = 0x4B400000u + (uint32_t)i; \
        float f; \
        memcpy(&f, &b, sizeof f); \
        return f - 12582912.0f; } \
    QUAL double tn__rnd_log(double x) {   /* x normal and > 0 (every u1 is): frexp's m and e from its bits */ \
        uint64_t xb; \
        memcpy(&xb, &x, sizeof xb); \
        int e = (int)((xb >> 52) & 2047u) - 1022; \
        xb = (xb & 0x800fffffffffffffull) | 0x3fe0000000000000ull; \
        double m; \
        memcpy(&m, &xb, sizeof m); \
        if (m < 0.70710678118654752440) { m = m + m; e = e - 1; } \
        double f = m - 1.0, s = f / (2.0 + f), z = s * s, p = 0.043478260869565216, de = tn__rnd_small_d(e); \
        p = fma(p, z, 0.047619047619047616); p = fma(p, z, 0.052631578947368418); p = fma(p, z, 0.058823529411764705); \
        p = fma(p, z, 0.066666666666666666); p = fma(p, z, 0.076923076923076927); p = fma(p, z, 0.090909090909090912); \
        p = fma(p, z, 0.1111111111111111); p = fma(p, z, 0.14285714285714285); p = fma(p, z, 0.20000000000000001); \
        p = fma(p, z, 0.33333333333333331); p = fma(p, z, 1.0); \
        return fma(de, 6.93147180369123816490e-01, fma(de, 1.90821492927058770002e-10, (s + s) * p)); } \
    QUAL void tn__rnd_sincos2pi(uint64_t w, double *cosine, double *sine) {   /* of 2 pi w 2^-53, w < 2^53 */ \
        int64_t k = (int64_t)((w + (1ull << 50) - 1u) >> 51); /* the nearest quarter turn (a half: the lower) */ \
        double ph = tn__rnd_small_d((int64_t)w - (k << 51)) * (1.57079632679489661923 * 4.4408920985006262e-16), z = ph * ph; \
        double ps = 2.8114572543455206e-15; \
        ps = fma(ps, z, -7.6471637318198164e-13); ps = fma(ps, z, 1.6059043836821613e-10); ps = fma(ps, z, -2.505210838544172e-08); \
        ps = fma(ps, z, 2.7557319223985893e-06); ps = fma(ps, z, -0.00019841269841269841); ps = fma(ps, z, 0.0083333333333333332); \
        ps = fma(ps, z, -0.16666666666666666); \
        double sn = fma(ph * z, ps, ph), pc = -1.5619206968586225e-16; \
        pc = fma(pc, z, 4.7794773323873853e-14); pc = fma(pc, z, -1.1470745597729725e-11); pc = fma(pc, z, 2.08767569878681e-09); \
        pc = fma(pc, z, -2.7557319223985888e-07); pc = fma(pc, z, 2.4801587301587302e-05); pc = fma(pc, z, -0.0013888888888888889); \
        pc = fma(pc, z, 0.041666666666666664); pc = fma(pc, z, -0.5); \
        double cs = fma(pc, z, 1.0); \
        TN__RND_QUARTER(double, uint64_t, k, cs, sn, cosine, sine) } \
    QUAL void tn__rnd_normal2(const uint32_t *x, double mean, double sd, double *z) { \
        double u1 = ((double)((((uint64_t)x[1] << 32) | x[0]) >> 11) + 1.0) * (1.0 / 9007199254740992.0); \
        double r = sqrt(-2.0 * tn__rnd_log(u1)), c, s; \
        tn__rnd_sincos2pi((((uint64_t)x[3] << 32) | x[2]) >> 11, &c, &s); \
        z[0] = fma(sd, r * c, mean); \
        z[1] = fma(sd, r * s, mean); } \
    QUAL float tn__rnd_logf(float x) {   /* as tn__rnd_log, in float32 */ \
        uint32_t xb; \
        memcpy(&xb, &x, sizeof xb); \
        int e = (int)((xb >> 23) & 255u) - 126; \
        xb = (xb & 0x807fffffu) | 0x3f000000u; \
        float m; \
        memcpy(&m, &xb, sizeof m); \
        if (m < 0.70710678f) { m = m + m; e = e - 1; } \
        float f = m - 1.0f, s = f / (2.0f + f), z = s * s, p = 0.11111111f, fe = tn__rnd_small_f(e); \
        p = fmaf(p, z, 0.14285715f); p = fmaf(p, z, 0.2f); p = fmaf(p, z, 0.33333334f); p = fmaf(p, z, 1.0f); \
        return fmaf(fe, 0.693145752f, fmaf(fe, 1.42860677e-06f, (s + s) * p)); } \
    QUAL void tn__rnd_sincos2pif(uint32_t w, float *cosine, float *sine) {   /* of 2 pi w 2^-24, w < 2^24; as tn__rnd_sincos2pi */ \
        int k = (int)((w + (1u << 21) - 1u) >> 22); \
        float ph = tn__rnd_small_f((int32_t)w - (k << 22)) * (1.57079633f * 2.384185791015625e-07f), z = ph * ph, ps = 2.75573192e-06f; \
        ps = fmaf(ps, z, -1.98412698e-04f); ps = fmaf(ps, z, 8.33333333e-03f); ps = fmaf(ps, z, -0.166666667f); \
        float sn = fmaf(ph * z, ps, ph), pc = -2.75573192e-07f; \
        pc = fmaf(pc, z, 2.48015873e-05f); pc = fmaf(pc, z, -1.38888889e-03f); pc = fmaf(pc, z, 4.16666667e-02f); pc = fmaf(pc, z, -0.5f); \
        float cs = fmaf(pc, z, 1.0f); \
        TN__RND_QUARTER(float, uint32_t, k, cs, sn, cosine, sine) } \
    QUAL void tn__rnd_normal4f(const uint32_t *x, float mean, float sd, float *z) { \
        for (int h = 0; h < 2; h++) { \
            float u1 = fmaf((float)x[2 * h], 2.3283064365386963e-10f, 1.16415321826934814453125e-10f); \
            float r = sqrtf(-2.0f * tn__rnd_logf(u1)), c, s; \
            tn__rnd_sincos2pif(x[2 * h + 1] >> 8, &c, &s); \
            z[2 * h] = fmaf(sd, r * c, mean); \
            z[2 * h + 1] = fmaf(sd, r * s, mean); } } \
    QUAL float tn__rnd_uniform_f(const uint32_t *x, int t, int bits, float scale, float low) { \
        return fmaf((float)(x[t] >> (32 - bits)) * (1.0f / (float)(1u << bits)), scale, low); } \
    QUAL double tn__rnd_uniform_d(const uint32_t *x, int t, double scale, double low) { \
        return fma(tn__rnd_u53(x[2 * t], x[2 * t + 1]), scale, low); } \
    QUAL int tn__rnd_bernoulli(const uint32_t *x, int t, double p) { return tn__rnd_u53(x[2 * t], x[2 * t + 1]) < p; } \
    QUAL int64_t tn__rnd_randint(const uint32_t *x, int t, uint64_t range, int64_t low) { \
        uint64_t a = ((uint64_t)x[2 * t + 1] << 32) | x[2 * t], al = a & 0xffffffffu, ah = a >> 32; \
        uint64_t bl = range & 0xffffffffu, bh = range >> 32; \
        uint64_t p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh; \
        uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu); \
        return (int64_t)((uint64_t)low + p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32)); }

TN__RANDOM_SOURCE(TN__VM_INLINE)   /* inlined: each level's kernels compile it with their own instructions (fmaf as one) */

/* Elements per Philox block. */
static int tn__rnd_per(int dist, tn_dtype t) { return (dist == TN_RAND_UNIFORM || dist == TN_RAND_NORMAL) && t != TN_F64 ? 4 : 2; }

/* What a kernel needs, from the node's params (host code, shared by both back ends). */
typedef struct tn__rnd_args {
    int dist;
    tn_dtype dtype;
    uint32_t draw;
    double a, b;             /* uniform: high - low, low; normal: mean, std; bernoulli: p */
    int64_t ilow;
    uint64_t range;
} tn__rnd_args;

static tn__rnd_args tn__rnd_args_of(const tn_var *node) {
    const tn_params *p = &node->p;
    tn__rnd_args r = { tn__p_rand_dist(p), tn__p_out_dtype(p), tn__p_rand_draw(p), tn__p_rand_a(p), tn__p_rand_b(p),
                       tn__p_rand_ilow(p), (uint64_t)tn__p_rand_ihigh(p) - (uint64_t)tn__p_rand_ilow(p) };
    if (r.dist == TN_RAND_UNIFORM) { r.a = tn__p_rand_b(p) - tn__p_rand_a(p); r.b = tn__p_rand_a(p); }
    return r;
}

/* >>random_cpu ------------------------------------------------------------ */
/* Elements e0, e0 + es, ... (n of them) of a draw, stored as A->dtype into
   dst (contiguous): the one definition of every draw's values on the CPU,
   for the Random op and for a draw inside a fused program. A block's words
   (and normal's pairs) are computed once for its run of elements. */
/* The four words of block j of a draw (the counter of the >>ops_random comment). */
static inline void tn__rnd_block(uint32_t k0, uint32_t k1, int64_t j, uint32_t draw, uint64_t calls, uint32_t *x) {
    x[0] = (uint32_t)(uint64_t)j; x[1] = (uint32_t)((uint64_t)j >> 32); x[2] = draw; x[3] = (uint32_t)calls;
    tn__philox10(k0, k1, x);
}

static void tn__rnd_fill_elems(const tn__rnd_args *A, uint64_t seed, uint64_t calls, int64_t e0, int64_t es, int64_t n, void *dst) {
    const int per = tn__rnd_per(A->dist, A->dtype);
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const float fs = (float)A->a, fl = (float)A->b;
    uint32_t x[4] = { 0, 0, 0, 0 };
    double z[2] = { 0, 0 };          /* normal: the block's draws, r and the angle's sine and cosine found once */
    float zf[4] = { 0, 0, 0, 0 };
    int64_t have = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t e = e0 + i * es, j = e / per;
        int t = (int)(e - j * per);
        if (j != have) {
            have = j;
            tn__rnd_block(k0, k1, j, A->draw, calls, x);
            if (A->dist == TN_RAND_NORMAL && A->dtype == TN_F64) tn__rnd_normal2(x, A->a, A->b, z);
            else if (A->dist == TN_RAND_NORMAL) tn__rnd_normal4f(x, (float)A->a, (float)A->b, zf);
        }
        double v = 0;
        switch (A->dist) {
        case TN_RAND_UNIFORM:
            if (A->dtype == TN_F32) { ((float *)dst)[i] = tn__rnd_uniform_f(x, t, 24, fs, fl); continue; }
            if (A->dtype == TN_F16) { ((uint16_t *)dst)[i] = tn__ew_f2h(tn__rnd_uniform_f(x, t, 11, fs, fl)); continue; }
            v = tn__rnd_uniform_d(x, t, A->a, A->b);
            break;
        case TN_RAND_NORMAL:
            if (A->dtype == TN_F32) { ((float *)dst)[i] = zf[t]; continue; }
            if (A->dtype == TN_F16) { ((uint16_t *)dst)[i] = tn__ew_f2h(zf[t]); continue; }
            v = z[t];
            break;
        case TN_RAND_BERNOULLI: v = tn__rnd_bernoulli(x, t, A->a); break;
        default: {
            int64_t k = tn__rnd_randint(x, t, A->range, A->ilow);
            if (A->dtype == TN_I64) ((int64_t *)dst)[i] = k;
            else ((int32_t *)dst)[i] = (int32_t)k;
            continue;
        }
        }
        switch (A->dtype) {
        case TN_F16: ((uint16_t *)dst)[i] = tn__ew_d2h(v); break;
        case TN_F32: ((float *)dst)[i] = (float)v; break;
        case TN_F64: ((double *)dst)[i] = v; break;
        case TN_BOOL: ((uint8_t *)dst)[i] = (uint8_t)(v != 0); break;
        case TN_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
        default: ((int64_t *)dst)[i] = (int64_t)v; break;
        }
    }
}

/* The words of TN__RND_LANES consecutive blocks j, j + 1, ... at once,
   lane by lane as tn__philox10 computes one (x[w][l]: word w of block
   j + l): loops over the lanes that compilers turn into vector multiplies
   (32 x 32 -> 64 bits), built for each instruction-set level of the
   >>vmath kernels and picked the same way. */
#define TN__RND_LANES 16
#define TN__RND_PHILOX_LANES(NAME, ATTR) \
    ATTR static void NAME(uint32_t k0, uint32_t k1, int64_t j, uint32_t draw, uint32_t calls, uint32_t (*x)[TN__RND_LANES]) { \
        uint32_t c0[TN__RND_LANES], c1[TN__RND_LANES], c2[TN__RND_LANES], c3[TN__RND_LANES]; \
        for (int l = 0; l < TN__RND_LANES; l++) { \
            c0[l] = (uint32_t)(uint64_t)(j + l); c1[l] = (uint32_t)((uint64_t)(j + l) >> 32); c2[l] = draw; c3[l] = calls; } \
        for (int r = 0; r < 10; r++) { \
            if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; } \
            for (int l = 0; l < TN__RND_LANES; l++) TN__PHILOX_ROUND(c0[l], c1[l], c2[l], c3[l], k0, k1) } \
        memcpy(x[0], c0, sizeof c0); memcpy(x[1], c1, sizeof c1); memcpy(x[2], c2, sizeof c2); memcpy(x[3], c3, sizeof c3); }
/* And the uniform floats of those blocks, v[4 l + t] = tn__rnd_uniform_f(x of
   block l, t, ...): fmaf is one instruction where the level has FMA. */
#if defined(__GNUC__) || defined(__clang__)
#define TN__RND_FMAF __builtin_fmaf
#else
#define TN__RND_FMAF fmaf
#endif
#define TN__RND_UNIFORM_LANES(NAME, ATTR) \
    ATTR static void NAME(uint32_t (*x)[TN__RND_LANES], int bits, float scale, float low, float *v) { \
        const float unit = 1.0f / (float)(1u << bits); \
        for (int l = 0; l < TN__RND_LANES; l++) \
            for (int t = 0; t < 4; t++) v[4 * l + t] = TN__RND_FMAF((float)(x[t][l] >> (32 - bits)) * unit, scale, low); }
TN__RND_PHILOX_LANES(tn__rnd_philox_lanes0, )
TN__RND_UNIFORM_LANES(tn__rnd_uniform_lanes0, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
TN__RND_PHILOX_LANES(tn__rnd_philox_lanes1, __attribute__((target("avx2"))))
TN__RND_PHILOX_LANES(tn__rnd_philox_lanes2, __attribute__((target("avx512f"))))
TN__RND_UNIFORM_LANES(tn__rnd_uniform_lanes1, __attribute__((target("avx2,fma"))))
TN__RND_UNIFORM_LANES(tn__rnd_uniform_lanes2, __attribute__((target("avx512f,fma"))))
#endif
/* Function f0, f1 or f2 for instruction-set level lv (tn__vm_level_now). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TN__RND_AT_LEVEL(f, lv) ((lv) == 2 ? f##2 : (lv) == 1 ? f##1 : f##0)
#else
#define TN__RND_AT_LEVEL(f, lv) ((void)(lv), f##0)
#endif

/* Normal draws, a block at a time (their time is tn__rnd_normal4f's
   arithmetic), built for each level too: where it has FMA, each of the
   draw's fmaf is one instruction instead of a call (the same bits: both
   round once). */
#define TN__RND_NORMAL_FILL(NAME, ATTR) \
    ATTR static void NAME(const tn__rnd_args *A, uint64_t seed, uint64_t calls, int64_t j0, int64_t j1, void *dst) { \
        const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32); \
        const float fs = (float)A->a, fl = (float)A->b; \
        for (int64_t j = j0; j < j1; j++) { \
            uint32_t x[4]; \
            float v[4]; \
            tn__rnd_block(k0, k1, j, A->draw, calls, x); \
            tn__rnd_normal4f(x, fs, fl, v); \
            if (A->dtype == TN_F16) for (int t = 0; t < 4; t++) ((uint16_t *)dst)[4 * (j - j0) + t] = tn__ew_f2h(v[t]); \
            else memcpy((float *)dst + 4 * (j - j0), v, sizeof v); } }
TN__RND_NORMAL_FILL(tn__rnd_fill_normal0, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
TN__RND_NORMAL_FILL(tn__rnd_fill_normal1, __attribute__((target("avx2,fma"))))
TN__RND_NORMAL_FILL(tn__rnd_fill_normal2, __attribute__((target("avx512f,fma"))))
#endif

/* Whole blocks [j0, j1) of a contiguous float32 or float16 uniform or
   normal draw, or a bool bernoulli draw (dropout's mask), into dst:
   tn__rnd_fill_elems's functions without its per-element division and
   switch, 16 blocks at a time where it can (the same bits; float32 of
   2^24 on two cores: uniform 160 -> 28 ms, normal 454 -> 229 ms). False
   for any other draw. */
static bool tn__rnd_fill_blocks(const tn__rnd_args *A, uint64_t seed, uint64_t calls, int64_t j0, int64_t j1, void *dst) {
    bool half = A->dtype == TN_F16, mask = A->dist == TN_RAND_BERNOULLI && A->dtype == TN_BOOL;
    if (!mask && ((A->dtype != TN_F32 && !half) || (A->dist != TN_RAND_UNIFORM && A->dist != TN_RAND_NORMAL))) return false;
    const int lv = tn__vm_level_now();
    if (A->dist == TN_RAND_NORMAL) { TN__RND_AT_LEVEL(tn__rnd_fill_normal, lv)(A, seed, calls, j0, j1, dst); return true; }
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const float fs = (float)A->a, fl = (float)A->b;
    const int bits = half ? 11 : 24;
    uint32_t xl[4][TN__RND_LANES];
    float vl[4 * TN__RND_LANES];
    for (int64_t jb = j0; jb < j1; jb += TN__RND_LANES) {
        int nl = j1 - jb < TN__RND_LANES ? (int)(j1 - jb) : TN__RND_LANES;
        bool whole = nl == TN__RND_LANES, lanes_u = whole && !mask;
        if (whole) TN__RND_AT_LEVEL(tn__rnd_philox_lanes, lv)(k0, k1, jb, A->draw, (uint32_t)calls, xl);
        if (lanes_u) TN__RND_AT_LEVEL(tn__rnd_uniform_lanes, lv)(xl, bits, fs, fl, vl);
        if (lanes_u && !half) { memcpy((float *)dst + 4 * (jb - j0), vl, sizeof vl); continue; }
        for (int l = 0; l < nl; l++) {
            int64_t j = jb + l;
            uint32_t x[4];
            if (whole) { x[0] = xl[0][l]; x[1] = xl[1][l]; x[2] = xl[2][l]; x[3] = xl[3][l]; }
            else tn__rnd_block(k0, k1, j, A->draw, calls, x);     /* the last blocks, fewer than a batch */
            if (mask) {
                for (int t = 0; t < 2; t++) ((uint8_t *)dst)[2 * (j - j0) + t] = (uint8_t)tn__rnd_bernoulli(x, t, A->a);
                continue;
            }
            float v[4];
            if (lanes_u) memcpy(v, vl + 4 * l, sizeof v);
            else for (int t = 0; t < 4; t++) v[t] = tn__rnd_uniform_f(x, t, bits, fs, fl);
            if (half) for (int t = 0; t < 4; t++) ((uint16_t *)dst)[4 * (j - j0) + t] = tn__ew_f2h(v[t]);
            else memcpy((float *)dst + 4 * (j - j0), v, sizeof v);
        }
    }
    return true;
}

/* tn__rnd_fill_elems, with the whole blocks of a contiguous run by
   tn__rnd_fill_blocks where the draw has them. */
static void tn__rnd_fill(const tn__rnd_args *A, uint64_t seed, uint64_t calls, int64_t e0, int64_t es, int64_t n, void *dst) {
    const int64_t per = tn__rnd_per(A->dist, A->dtype), size = (int64_t)tn_dtype_size(A->dtype);
    int64_t head = (per - e0 % per) % per, nb = es == 1 && n > head ? (n - head) / per : 0;
    if (nb > 0 && tn__rnd_fill_blocks(A, seed, calls, (e0 + head) / per, (e0 + head) / per + nb, (char *)dst + head * size)) {
        int64_t done = head + nb * per;
        if (head > 0) tn__rnd_fill_elems(A, seed, calls, e0, 1, head, dst);
        if (n > done) tn__rnd_fill_elems(A, seed, calls, e0 + done, 1, n - done, (char *)dst + done * size);
        return;
    }
    tn__rnd_fill_elems(A, seed, calls, e0, es, n, dst);
}

typedef struct tn__rnd_job { tn__rnd_args A; uint64_t seed, calls; char *out; int64_t n; } tn__rnd_job;

static void tn__rnd_range(void *ctx, int64_t lo, int64_t hi) {      /* blocks [lo, hi) */
    const tn__rnd_job *J = (const tn__rnd_job *)ctx;
    int64_t per = tn__rnd_per(J->A.dist, J->A.dtype), e0 = lo * per, e1 = hi * per < J->n ? hi * per : J->n;
    tn__rnd_fill(&J->A, J->seed, J->calls, e0, 1, e1 - e0, J->out + e0 * (int64_t)tn_dtype_size(J->A.dtype));
}

/* The draw's parameters of a program's instruction k (a TN_OP_RANDOM). */
static tn__rnd_args tn__rnd_args_of_instr(const tn_ew_program *p, int k) {
    const tn_ew_rand *R = &p->rand[k];
    tn__rnd_args r = { R->dist, (tn_dtype)p->instr[k].dtype, R->draw, R->a, R->b, R->ilow, R->range };
    return r;
}

/* A draw of a variable's shape may join an elementwise kernel (the fusion
   pass): its program is one TN_OP_RANDOM of inputs seed, calls and the
   variable, whose shape it takes. */
static bool tn__random_fusable(const tn_var *node) {
    const char *prep, *val;
    return node->op == TN_OP_RANDOM && node->n_in == 3 && node->n_out == 1 && tn__p_rand_ndim(&node->p) < 0 &&
           tn__random_cuda_expr(tn__p_rand_dist(&node->p), node->type.dtype, &prep, &val);
}

static void tn__random_program(const tn_var *node, tn__ew_prog1 *s) {
    memset(s, 0, sizeof *s);
    s->owner = node;
    tn__rnd_args A = tn__rnd_args_of(node);
    for (int i = 0; i < 3; i++) s->in_dtype[i] = node->in[i]->type.dtype;
    s->instr[0] = (tn_ew_instr){ .op = TN_OP_RANDOM, .dtype = (int8_t)A.dtype, .in_dtype = (int8_t)A.dtype, .a = 0, .b = 1, .c = 2 };
    s->rand[0] = (tn_ew_rand){ A.dist, A.draw, A.a, A.b, A.ilow, A.range, (uint64_t)1 << 2 };
    s->out_reg[0] = 3;
    s->out_dtype[0] = A.dtype;
    s->p = (tn_ew_program){ 3, s->in_dtype, 1, s->instr, 1, s->out_reg, s->out_dtype, s->rand, NULL };
}

static void tn__rnd_fill_instr(const tn_ew_program *p, int k, uint64_t seed, uint64_t calls, int64_t e0, int64_t es, int64_t n, void *dst) {
    tn__rnd_args A = tn__rnd_args_of_instr(p, k);
    tn__rnd_fill(&A, seed, calls, e0, es, n, dst);
}

/* Instruction k, a TN_OP_RANDOM, is one both engines run: its seed and call
   count are int64 inputs and its distribution has a draw of its dtype. */
static bool tn__ew_rand_check(const tn_ew_program *p, int k, char *why, size_t cap) {
    const tn_ew_instr *in = &p->instr[k];
    const char *prep, *val;
    if (!p->rand) { snprintf(why, cap, "the program has no draws"); return false; }
    if (in->a < 0 || in->a >= p->n_in || in->b < 0 || in->b >= p->n_in || p->in_dtype[in->a] != TN_I64 || p->in_dtype[in->b] != TN_I64) {
        snprintf(why, cap, "the seed and call count are registers %d and %d, not int64 inputs", in->a, in->b);
        return false;
    }
    if (!tn__random_cuda_expr(p->rand[k].dist, (tn_dtype)in->dtype, &prep, &val)) {
        snprintf(why, cap, "no draw of distribution %d in %s", p->rand[k].dist, tn_dtype_name((tn_dtype)in->dtype));
        return false;
    }
    return true;
}

/* The value of a 0-d int64 input. */
static uint64_t tn__rnd_scalar(const tn_array *s) {
    int64_t v;
    memcpy(&v, s->data, sizeof v);
    return (uint64_t)v;
}

static tn_result tn__random_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_array *y = out[0];
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "Random (node %d): the output is not contiguous", node->id);
    tn__rnd_job J = { tn__rnd_args_of(node), tn__rnd_scalar(in[0]), tn__rnd_scalar(in[1]), (char *)y->data, tn_array_size(y) };
    int per = tn__rnd_per(J.A.dist, J.A.dtype);
    tn__parallel_for((J.n + per - 1) / per, 4096, tn__rnd_range, &J);
    return TN_OK;
}

/* >>random_cuda ----------------------------------------------------------- */
/* A draw's values as CUDA C, for the kernel below and for a draw inside a
   fused kernel (tensor_cuda.h >>cuda_codegen): `prep`, a statement run once
   a block, after `x` (the block's Philox words) is computed, and `val`, the
   stored value of its element t, over the names x, t, a, b, ilow and range.
   False for a distribution or dtype without one. */
TN_API bool tn__random_cuda_expr(int dist, tn_dtype t, const char **prep, const char **val) {
    *prep = "";
    *val = NULL;
    if ((unsigned)t >= TN_DTYPE_COUNT || t == TN_DTYPE_NONE) return false;
    switch (dist) {
    case TN_RAND_UNIFORM:
        *val = t == TN_F32 ? "tn__rnd_uniform_f(x, t, 24, (float)a, (float)b)" : t == TN_F16 ? "tn_f2h(tn__rnd_uniform_f(x, t, 11, (float)a, (float)b))"
             : t == TN_F64 ? "tn__rnd_uniform_d(x, t, a, b)" : NULL;
        break;
    case TN_RAND_NORMAL:
        *val = t == TN_F32 ? "z[t]" : t == TN_F16 ? "tn_f2h(z[t])" : t == TN_F64 ? "z[t]" : NULL;
        *prep = t == TN_F64 ? "double z[2];   /* the block's pair */ tn__rnd_normal2(x, a, b, z);"
                            : "float z[4];   /* the block's two pairs */ tn__rnd_normal4f(x, (float)a, (float)b, z);";
        break;
    case TN_RAND_BERNOULLI:
        *val = t == TN_F16 ? "tn_d2h((double)tn__rnd_bernoulli(x, t, a))" : "tn__rnd_bernoulli(x, t, a)";
        break;
    case TN_RAND_RANDINT:
        *val = t == TN_I32 ? "(int)tn__rnd_randint(x, t, range, ilow)" : t == TN_I64 ? "tn__rnd_randint(x, t, range, ilow)" : NULL;
        break;
    default: break;
    }
    return *val != NULL;
}

/* The library's draw functions (TN__RANDOM_SOURCE) as CUDA C, for a kernel
   whose prelude has defined int64_t, uint64_t, tn_f2h and tn_d2h. */
TN_API const char *tn__random_cuda_helpers(void) {
    return "typedef unsigned int uint32_t;\n"
           "typedef int int32_t;\n"
           "#define TN__QUAL static __device__ __forceinline__\n"
           TN__XSTRINGIFY(TN__RANDOM_SOURCE(TN__QUAL)) "\n"
           "#undef TN__QUAL\n";
}

/* The kernel as CUDA C for tensor_cuda.h's >>cuda_random section: the
   functions above as text, a thread per Philox block in a grid-stride loop
   (the seed and call count read once a thread), each whole block stored by
   one access when the output is aligned for it, and the last, partial block
   by one thread after the loop; extern "C"
   tn_random(seed, calls, y, n, draw, a, b, ilow, range). Returns the length
   snprintf reports, or -1 for a distribution or dtype without one. */
TN_API int tn__random_cuda_source(int dist, tn_dtype t, char *buf, size_t cap) {
    static const char *const st[TN_DTYPE_COUNT] = { NULL, "unsigned char", "int", "long long", "unsigned short", "float", "double" };
    const char *prep, *val;
    if ((unsigned)t >= TN_DTYPE_COUNT || !st[t] || !tn__random_cuda_expr(dist, t, &prep, &val)) return -1;
    return snprintf(buf, cap,
        "typedef long long int64_t;\n"
        "typedef unsigned long long uint64_t;\n"
        "typedef unsigned int uint32_t;\n"
        "typedef int int32_t;\n"
        "__device__ __forceinline__ unsigned short tn_f2h(float f) { unsigned short h; asm(\"cvt.rn.f16.f32 %%0, %%1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
        "__device__ __forceinline__ unsigned short tn_d2h(double d) { unsigned short h; asm(\"cvt.rn.f16.f64 %%0, %%1;\" : \"=h\"(h) : \"d\"(d)); return h; }\n"
        "#define TN__QUAL static __device__ __forceinline__\n"
        "%s\n"
        "typedef %s tn_t;\n"
        "enum { PER = %d };   /* draws a Philox block */\n"
        "/* a block's draws stored by one access of their size (whole sectors written at once) */\n"
        "template <int B> struct tn_vec;\n"
        "template <> struct tn_vec<2> { typedef unsigned short t; };\n"
        "template <> struct tn_vec<4> { typedef unsigned int t; };\n"
        "template <> struct tn_vec<8> { typedef uint2 t; };\n"
        "template <> struct tn_vec<16> { typedef uint4 t; };\n"
        "typedef tn_vec<PER * sizeof(tn_t)>::t tn_v;\n"
        "__device__ __forceinline__ void tn_draw(unsigned long long seed, uint32_t calls, unsigned int draw, long long j, double a, double b,\n"
        "                                        long long ilow, unsigned long long range, tn_t *v) {\n"
        "    uint32_t x[4] = { (uint32_t)j, (uint32_t)((unsigned long long)j >> 32), draw, calls };\n"
        "    tn__philox10((uint32_t)seed, (uint32_t)(seed >> 32), x);\n"
        "    (void)a; (void)b; (void)ilow; (void)range;\n"
        "    %s\n"
        "    for (int t = 0; t < PER; t++) v[t] = %s;\n"
        "}\n"
        "extern \"C\" __global__ void tn_random(const long long *__restrict__ seedp, const long long *__restrict__ callsp, tn_t *__restrict__ y,\n"
        "                                       long long n, unsigned int draw, double a, double b, long long ilow, unsigned long long range) {\n"
        "    const unsigned long long seed = (unsigned long long)*seedp;\n"
        "    const uint32_t calls = (uint32_t)*callsp;\n"
        "    const long long whole = n / PER;\n"
        "    const bool vec = (unsigned long long)y %% sizeof(tn_v) == 0;\n"
        "    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < whole; j += (long long)gridDim.x * blockDim.x) {\n"
        "        __align__(16) tn_t v[PER];\n"
        "        tn_draw(seed, calls, draw, j, a, b, ilow, range, v);\n"
        "        if (vec) *(tn_v *)(y + j * PER) = *(const tn_v *)v;\n"
        "        else for (int t = 0; t < PER; t++) y[j * PER + t] = v[t];\n"
        "    }\n"
        "    if (blockIdx.x == 0 && threadIdx.x == 0 && whole * PER < n) {\n"
        "        tn_t v[PER];\n"
        "        tn_draw(seed, calls, draw, whole, a, b, ilow, range, v);\n"
        "        for (int t = 0; whole * PER + t < n; t++) y[whole * PER + t] = v[t];\n"
        "    }\n"
        "}\n",
        TN__XSTRINGIFY(TN__RANDOM_SOURCE(TN__QUAL)), st[t], tn__rnd_per(dist, t), prep, val);
}

/* >>random_infer_label ---------------------------------------------------- */
static tn_result tn__random_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    char sb[128];
    for (int k = 0; k < 2; k++)
        if (node->n_in < 2 || in[k].dtype != TN_I64 || in[k].ndim != 0)
            return tn__err(TN_ERR_INVALID, "Random: the stream's %s must be an int64 scalar; it is %s %s", k ? "call count" : "seed",
                           node->n_in < 2 ? "missing" : tn_dtype_name(in[k].dtype), node->n_in < 2 ? "" : tn__shape_str(in[k].ndim, in[k].shape, sb));
    const tn_params *p = &node->p;
    int nd = tn__p_rand_ndim(p);
    memset(out, 0, sizeof *out);
    out->dtype = tn__p_out_dtype(p);
    if (nd < 0) {
        if (node->n_in < 3) return tn__err(TN_ERR_INTERNAL, "Random: a draw of a variable's shape needs the variable");
        out->ndim = in[2].ndim;
        for (int d = 0; d < out->ndim; d++) { out->shape[d] = in[2].shape[d]; out->bcast[d] = in[2].bcast[d]; }
    } else {
        out->ndim = nd;
        for (int d = 0; d < nd; d++) { out->shape[d] = tn__p_rand_shape(p)[d]; out->bcast[d] = out->shape[d] == 1; }
    }
    return TN_OK;
}

static const char *tn__rnd_name(int dist) {
    return dist == TN_RAND_UNIFORM ? "uniform" : dist == TN_RAND_NORMAL ? "normal" : dist == TN_RAND_BERNOULLI ? "bernoulli" : "randint";
}

/* Random{normal,draw=1} */
static void tn__random_label(const tn_var *node, char *buf, size_t cap) {
    snprintf(buf, cap, "Random{%s,draw=%u}", tn__rnd_name(tn__p_rand_dist(&node->p)), (unsigned)tn__p_rand_draw(&node->p));
}

/* >>random_constructors --------------------------------------------------- */
struct tn_rstream {
    tn_var *state;          /* shared int64 [seed, calls] */
    tn_var *seed, *calls;   /* its elements, 0-d views: what each draw reads */
    tn_var *next;           /* state + [0, 1]: the update tn_function adds */
    uint32_t n_draws;
};

TN_API tn_rstream *tn_random_stream(tn_graph *g, uint64_t seed) {
    if (!g) { tn__err_null("tn_random_stream", "g"); return NULL; }
    int64_t two = 2, v[2] = { (int64_t)seed, 0 }, inc[2] = { 0, 1 };
    tn_array *a = tn_array_from_data(TN_I64, 1, &two, v), *b = tn_array_from_data(TN_I64, 1, &two, inc);
    tn_rstream *s = (tn_rstream *)tn__graph_alloc(g, sizeof *s);
    tn_var *st = a && b && s ? tn_shared_fixed(g, "random_state", a) : NULL, *c = st ? tn_constant(g, b) : NULL;
    tn_var *nx = c ? tn_add(st, c) : NULL;
    tn_var *el[2] = { NULL, NULL };
    for (int k = 0; k < 2 && nx; k++) {
        tn_var *one = tn_slice(st, 0, k, k + 1, 1);
        el[k] = one ? tn_dimshuffle(one, 0, NULL) : NULL;
        if (!el[k]) nx = NULL;
    }
    tn_array_free(a);
    tn_array_free(b);
    if (!nx) { tn__err_in("tn_random_stream", tn_last_result() != TN_OK ? tn_last_result() : TN_ERR_OOM); return NULL; }
    s->state = st;
    s->seed = el[0];
    s->calls = el[1];
    s->next = nx;
    return s;
}

TN_API tn_var *tn_rstream_state(const tn_rstream *s) {
    if (!s) { tn__err_null("tn_rstream_state", "s"); return NULL; }
    return s->state;
}

TN_API tn_result tn_rstream_seed(tn_rstream *s, uint64_t seed) {
    if (!s) return tn__err_null("tn_rstream_seed", "s");
    int64_t two = 2, v[2] = { (int64_t)seed, 0 };
    tn_array *a = tn_array_from_data(TN_I64, 1, &two, v);
    if (!a) return tn__err_in("tn_rstream_seed", tn_last_result());
    tn_result r = tn_shared_set_value(s->state, a);
    tn_array_free(a);
    return r;
}

/* Checks a draw's dtype and parameters; fills the params. */
static tn_result tn__rnd_check(const char *who, int dist, tn_dtype *t, double a, double b, int64_t ilow, int64_t ihigh) {
    if (*t == TN_DTYPE_NONE)
        *t = dist == TN_RAND_RANDINT ? TN_I64 : tn_get_config()->floatX != TN_DTYPE_NONE ? tn_get_config()->floatX : TN_F32;
    if (*t <= TN_DTYPE_NONE || *t >= TN_DTYPE_COUNT) return tn__err(TN_ERR_DTYPE, "%s: invalid dtype %d", who, (int)*t);
    switch (dist) {
    case TN_RAND_UNIFORM:
    case TN_RAND_NORMAL:
        if (!tn_dtype_is_float(*t)) return tn__err(TN_ERR_DTYPE, "%s: dtype %s; %s draws are float16, float32 or float64", who, tn_dtype_name(*t), tn__rnd_name(dist));
        if (!isfinite(a) || !isfinite(b)) return tn__err(TN_ERR_INVALID, "%s: parameters %g and %g must be finite", who, a, b);
        if (dist == TN_RAND_UNIFORM && !(a <= b && isfinite(b - a)))
            return tn__err(TN_ERR_INVALID, "%s: low %g must not exceed high %g (and high - low must be finite)", who, a, b);
        if (dist == TN_RAND_NORMAL && b < 0) return tn__err(TN_ERR_INVALID, "%s: std %g is negative", who, b);
        return TN_OK;
    case TN_RAND_BERNOULLI:
        if (!(a >= 0 && a <= 1)) return tn__err(TN_ERR_INVALID, "%s: p %g is not in [0, 1]", who, a);
        return TN_OK;
    case TN_RAND_RANDINT:
        if (*t != TN_I32 && *t != TN_I64) return tn__err(TN_ERR_DTYPE, "%s: dtype %s; randint draws int32 or int64", who, tn_dtype_name(*t));
        if (ilow >= ihigh) return tn__err(TN_ERR_INVALID, "%s: the range [%lld, %lld) is empty", who, (long long)ilow, (long long)ihigh);
        if (*t == TN_I32 && (ilow < INT32_MIN || ihigh - 1 > INT32_MAX))
            return tn__err(TN_ERR_INVALID, "%s: the range [%lld, %lld) does not fit int32", who, (long long)ilow, (long long)ihigh);
        return TN_OK;
    default:
        return tn__err(TN_ERR_INVALID, "%s: unknown distribution %d", who, dist);
    }
}

static tn_var *tn__rnd_make(const char *who, tn_rstream *s, int dist, tn_dtype t, tn_var *like, int ndim, const int64_t *shape,
                            double a, double b, int64_t ilow, int64_t ihigh) {
    if (!s) { tn__err_null(who, "stream"); return NULL; }
    if (tn__rnd_check(who, dist, &t, a, b, ilow, ihigh) != TN_OK) return NULL;
    if (!like) {
        char sb[128];
        bool ok = ndim >= 0 && ndim <= TN_MAX_DIMS && (ndim == 0 || shape);
        for (int d = 0; ok && d < ndim; d++) ok = shape[d] >= 0;
        if (!ok) {
            tn__err(TN_ERR_SHAPE, "%s: shape %s must have 0..%d dims, each known and >= 0", who,
                    ndim >= 0 && ndim <= TN_MAX_DIMS && shape ? tn__shape_str(ndim, shape, sb) : "(bad rank)", TN_MAX_DIMS);
            return NULL;
        }
    } else if (like->graph != s->state->graph) {
        tn__err(TN_ERR_GRAPH, "%s: the variable and the stream belong to different graphs", who);
        return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_rand(&p, dist, s->n_draws, t, like ? -1 : ndim, shape, a, b, ilow, ihigh);
    tn_var *in[3] = { s->seed, s->calls, like };
    tn_var *v = tn__node(s->state->graph, TN_OP_RANDOM, like ? 3 : 2, in, &p, s, who);
    if (v) s->n_draws++;
    return v;
}

TN_API tn_var *tn_random_uniform(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, double low, double high) {
    return tn__rnd_make("tn_random_uniform", s, TN_RAND_UNIFORM, t, NULL, ndim, shape, low, high, 0, 0);
}
TN_API tn_var *tn_random_normal(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, double mean, double std) {
    return tn__rnd_make("tn_random_normal", s, TN_RAND_NORMAL, t, NULL, ndim, shape, mean, std, 0, 0);
}
TN_API tn_var *tn_random_bernoulli(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, double p) {
    return tn__rnd_make("tn_random_bernoulli", s, TN_RAND_BERNOULLI, t, NULL, ndim, shape, p, 0, 0, 0);
}
TN_API tn_var *tn_random_randint(tn_rstream *s, tn_dtype t, int ndim, const int64_t *shape, int64_t low, int64_t high) {
    return tn__rnd_make("tn_random_randint", s, TN_RAND_RANDINT, t, NULL, ndim, shape, 0, 0, low, high);
}
TN_API tn_var *tn_random_like(tn_rstream *s, tn_rdist dist, tn_dtype t, tn_var *like, double a, double b) {
    const char *who = "tn_random_like";
    if (!like) { tn__err_null(who, "like"); return NULL; }
    int64_t il = 0, ih = 0;
    if (dist == TN_RAND_RANDINT) {
        if (!(a == floor(a) && b == floor(b) && fabs(a) <= 9007199254740992.0 && fabs(b) <= 9007199254740992.0)) {
            tn__err(TN_ERR_INVALID, "%s: randint's bounds %g and %g must be integers of magnitude at most 2^53", who, a, b);
            return NULL;
        }
        il = (int64_t)a; ih = (int64_t)b; a = b = 0;
    }
    return tn__rnd_make(who, s, (int)dist, t, like, 0, NULL, a, b, il, ih);
}

TN_API tn_var *tn_dropout(tn_rstream *s, tn_var *x, double p) {
    const char *who = "tn_dropout";
    if (!s) { tn__err_null(who, "stream"); return NULL; }
    if (!x) { tn__err_null(who, "x"); return NULL; }
    if (!tn_dtype_is_float(x->type.dtype)) {
        tn__err(TN_ERR_DTYPE, "%s: x%s%s%s is %s; dropout takes floats", who, x->name ? " '" : "", x->name ? x->name : "", x->name ? "'" : "",
                tn_dtype_name(x->type.dtype));
        return NULL;
    }
    if (!(p >= 0 && p <= 1)) { tn__err(TN_ERR_INVALID, "%s: p %g is not in [0, 1]", who, p); return NULL; }
    if (p == 0) return x;
    tn_var *keep = tn__rnd_make(who, s, TN_RAND_BERNOULLI, TN_BOOL, x, 0, NULL, 1 - p, 0, 0, 0);
    return tn_where(keep, tn_mul(x, tn_lit(x, p < 1 ? 1 / (1 - p) : 0)), tn_lit(x, 0));
}

/* tn_function's update of the stream a draw reads. */
static tn_result tn__random_state_update(const tn_var *node, tn_update *u) {
    const tn_rstream *s = (const tn_rstream *)node->ext;
    if (!s) return tn__err(TN_ERR_INTERNAL, "Random (node %d): no stream", node->id);
    u->shared = s->state;
    u->value = s->next;
    return TN_OK;
}

/* >>random_rows: this part's rows of the op table (the >>ops_table section) --- */
/* Discrete: nothing flows back into the state or the shape's variable. */
#define TN__RANDOM_OP_ROWS \
    { .op = TN_OP_RANDOM, .name = "Random", .kind = TN_OPK_OTHER, .arity = -1, .infer = tn__random_infer, .cpu = tn__random_cpu, \
                       .label = tn__random_label, .flags = TN_OPF_DISCRETE, .state_update = tn__random_state_update },

#endif /* TENSOR_OPS_IMPLEMENTATION_HERE */
