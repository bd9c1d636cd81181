// Compiled with mpg::mpg alone: the host shim's headers must not be reachable. If some acl/acl.h
// is (the real toolkit in a system directory), it must not be the shim's.
#include "mpg/mpg.hpp"

#if __has_include(<acl/acl.h>)
#include <acl/acl.h>
#ifdef MPG_ACL_HOST
#error \
    "mpg::mpg's include path reaches the host shim's acl/acl.h: it must be opt-in (mpg::acl_host)"
#endif
#endif
#if __has_include(<aclnnop/aclnn_moe_token_permute_grad.h>)
#include <aclnnop/aclnn_moe_token_permute_grad.h>
#ifdef MPG_ACL_HOST
#error "mpg::mpg's include path reaches the host shim's aclnnop/ headers"
#endif
#endif

int main() {
  return 0;
}
