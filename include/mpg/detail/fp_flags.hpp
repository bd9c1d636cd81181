// Refuses to compile under value-changing floating-point flags.
//
// mpg is header-only, so its reference and portable paths, and the vector intrinsics that GCC
// lowers to plain vector arithmetic, are compiled with the consumer's flags. Flags that let the
// compiler reassociate sums (-fassociative-math), ignore the sign of zero (-fno-signed-zeros, which
// lets 0.0f + x be folded to x, so +0.0 (a dropped copy 0) plus -0.0 comes out -0.0) or assume no
// NaN or infinity
// (-ffinite-math-only) change the bits mpg promises. -ffast-math and -Ofast imply all three.
// Flags that do not change a value here are accepted: -ffp-contract=fast (every product is
// rounded through a barrier before it is added, see gather_sum.hpp), -fno-math-errno,
// -fno-trapping-math and -freciprocal-math (mpg divides nothing).
//
// What can be seen: GCC announces each of these flags with a macro; Clang (14) announces only
// -ffast-math / -Ofast (__FAST_MATH__) and -ffinite-math-only, so under Clang a bare
// -fno-signed-zeros or -fassociative-math goes unnoticed.
//
// To opt out, define MPG_ALLOW_UNSAFE_MATH before including mpg (results may then differ from
// the contract's). The safe way is to call mpg from translation units compiled without these
// flags: inline functions of the same name compiled with and without them are one function to
// the linker, so every translation unit that includes mpg must be compiled without them.
#pragma once

#ifndef MPG_ALLOW_UNSAFE_MATH
#if defined(__FAST_MATH__)
#error \
    "mpg: -ffast-math / -Ofast change mpg's results (sums reassociated, -0.0 lost, NaN assumed away); compile the translation units that include mpg without them, or define MPG_ALLOW_UNSAFE_MATH to accept results that may differ from the contract"
#elif defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error \
    "mpg: -ffinite-math-only changes mpg's results (NaN and infinity are part of the contract); compile the translation units that include mpg without it, or define MPG_ALLOW_UNSAFE_MATH to accept results that may differ from the contract"
#elif defined(__ASSOCIATIVE_MATH__)
#error \
    "mpg: -fassociative-math changes mpg's results (the order of the adds is part of the contract); compile the translation units that include mpg without it, or define MPG_ALLOW_UNSAFE_MATH to accept results that may differ from the contract"
#elif defined(__NO_SIGNED_ZEROS__)
#error \
    "mpg: -fno-signed-zeros changes mpg's results (0.0f + x may be folded to x, so +0.0 + -0.0 gives -0.0); compile the translation units that include mpg without it, or define MPG_ALLOW_UNSAFE_MATH to accept results that may differ from the contract"
#endif
#endif
