// LOADER_REGISTER_WORKER_INIT_FN with loader/worker_info.h as the only loader header.
#include "loader/worker_info.h"
#include "shared.h"

namespace consumer {
bool init_ran = false;
}

LOADER_REGISTER_WORKER_INIT_FN("consumer_init", [](int) { consumer::init_ran = true; });
