/* A library the missing-dependency test plugin links against, kept off every search path at
 * run time, so dlopen fails with "cannot open shared object file" for the dependency while the
 * plugin file itself exists. */
int tp_absent_dep_answer(void);
int tp_absent_dep_answer(void)
{
    return 42;
}
