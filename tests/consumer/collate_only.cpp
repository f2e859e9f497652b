// LOADER_REGISTER_COLLATE_FN with loader/collate.h as the only loader header.
#include "loader/collate.h"

LOADER_REGISTER_COLLATE_FN("consumer_collate", [](std::vector<loader::Value>& samples) {
  return loader::Value::dict({{"batch", loader::default_collate(samples)}, {"collated_by", "consumer_collate"}});
});
