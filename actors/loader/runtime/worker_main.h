// Compatibility: the worker entry point's header is loader/worker_main.h (public,
// beside dataloader.h); loader/runtime/ holds the runtime's private headers.
#pragma once

#include "loader/worker_main.h"
