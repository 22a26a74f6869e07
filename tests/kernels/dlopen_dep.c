/* A dependency library for dlopen_needs.c: the test builds it, links against it, then deletes it. */
int offloadrt_test_dep_value(void) { return 42; }
