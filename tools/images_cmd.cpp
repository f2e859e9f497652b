// `loader images ...`: the image datasets from the command line (datasets/loader/image).
//
//   loader images list ROOT        # {"classes": [...]} then {"path": ..., "class_index": ...}
//                                  # per sample, in ImageFolder's order
//   loader images get ROOT --index I [--transform none|train|eval] [--size N] [--seed S]
//                                  [--decode-scaling] [--mode RGB|L] --out F.pt
//                                  # sample I as torch.save(image) (uint8 or float32 [C, H, W])
//
// Other files add subcommands to the group through add_images_make_commands (command.h).
// Exit status 1 for a file that cannot be read or written, 2 for bad arguments.
#include <iostream>
#include <memory>

#include "command.h"

namespace loader::tool {

// Used while no other file of the tool defines add_images_make_commands (command.h).
__attribute__((weak)) void add_images_make_commands(CLI::App* /*images*/) {}

void add_images_commands(CLI::App& app) {
  CLI::App* images = app.add_subcommand("images", "Image folders: list their samples, decode and transform one");
  require_subcommand(images);
  add_images_make_commands(images);
}

}  // namespace loader::tool
