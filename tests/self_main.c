/* tests/self_main.c - the main of the CPU self tests' program (build/self_cpu):
   the tests are compiled with the implementation into build/tensor_cpu.o
   (tests/self_tests.c with SELF_OBJECT), which the other tests link too. */
int th_self_main(int argc, char **argv);
int main(int argc, char **argv) { return th_self_main(argc, argv); }
