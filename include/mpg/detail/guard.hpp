// Internal header: only the public headers under include/mpg/ may include it.
#pragma once
#ifndef MPG_INSIDE_PUBLIC_HEADER
#error \
    "mpg/detail/ headers are internal: include <mpg/mpg.hpp> (or another public mpg header) instead"
#endif
