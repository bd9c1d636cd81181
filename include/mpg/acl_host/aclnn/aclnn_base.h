// mpg's host shim of aclnn/aclnn_base.h, which every aclnnop/aclnn_<op>.h includes.
#ifndef MPG_ACL_HOST_ACLNN_ACLNN_BASE_H_
#define MPG_ACL_HOST_ACLNN_ACLNN_BASE_H_

#include "acl/acl_base.h"
#include "acl/acl_rt.h"
#include "aclnn/acl_meta.h"

#endif  // MPG_ACL_HOST_ACLNN_ACLNN_BASE_H_
