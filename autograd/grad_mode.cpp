#include "autograd/grad_mode.h"

namespace zdl {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_recomputable_forward = false;
}

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
bool recomputable_forward() { return t_recomputable_forward; }
RecomputableForwardGuard::RecomputableForwardGuard() : prev_(t_recomputable_forward) { t_recomputable_forward = true; }
RecomputableForwardGuard::~RecomputableForwardGuard() { t_recomputable_forward = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }

}  // namespace zdl
