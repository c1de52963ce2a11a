/* The one file of the program that compiles the implementation (the CMake
   builds generate theirs with tensor_add_implementation; the C++ program of
   tests/consumers/cxx links this one). */
#define TENSOR_IMPLEMENTATION
#include <tensor.h>
#include <tensor_cuda.h>
