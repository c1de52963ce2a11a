/* The implementation, compiled as C and linked with the C++ program. */
#define TENSOR_IMPLEMENTATION
#include <tensor.h>
#include <tensor_cuda.h>
