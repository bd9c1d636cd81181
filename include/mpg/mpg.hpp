// mpg: MoE token-permute backward on CPUs. The umbrella header.
//   mpg/permute_grad.hpp  the op, typed C++ API and Eigen overloads (numerics stated there)
//   mpg/init_routing_v2_grad.hpp  MoeInitRoutingV2Grad: the same sum in binary-bins order
//   mpg/unpermute.hpp     MoeTokenUnpermute: gather, weight by probs, sum
//   mpg/unpermute_grad.hpp MoeTokenUnpermuteGrad: the combine's backward, dX and dP
//   mpg/routing.hpp       sorted_indices from routing decisions, and the forward permute
//   mpg/token_permute.hpp the forward MoeTokenPermute: sort copies by expert, copy rows
//   mpg/aclnn.hpp         the vendor-style two-phase API
// The contract every header cites, docs/contract.md, is installed beside the headers as
// <prefix>/share/doc/mpg/contract.md.
#pragma once

#include "mpg/aclnn.hpp"
#include "mpg/init_routing_v2_grad.hpp"
#include "mpg/options.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/routing.hpp"
#include "mpg/status.hpp"
#include "mpg/token_permute.hpp"
#include "mpg/types.hpp"
#include "mpg/unpermute.hpp"
#include "mpg/unpermute_grad.hpp"
#include "mpg/version.hpp"
