// mpg's host shim of acl/acl.h: the ACL runtime calls a device test program makes, on the CPU.
// What is emulated and what is not: acl/acl_rt.h. The ops: aclnnop/aclnn_<op>.h.
#ifndef INC_EXTERNAL_ACL_ACL_H_
#define INC_EXTERNAL_ACL_ACL_H_

#include "acl/acl_base.h"
#include "acl/acl_rt.h"

#endif  // INC_EXTERNAL_ACL_ACL_H_
