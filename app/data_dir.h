// Where the `ranksim` command finds the shipped topologies and scenarios (`ranksim list`).
//
// Installed, they are in <prefix>/share/ranksim, and the command in <prefix>/bin: the folder is
// found from the running program's own path (/proc/self/exe), so a package installed under any
// prefix (apt, cmake --install --prefix, a copied tree) finds its own files and no path of the
// machine that built it is compiled in. The build tree has the same shape: <build>/share/ranksim
// holds links to the repository's topologies/ and scenarios/ (app/CMakeLists.txt), and the
// command and the test programs sit one folder below <build>.
#pragma once

#include <string>

namespace ranksim::app {

// <dir of the running program>/../share/ranksim when it holds topologies/; otherwise "." (the
// current folder, as a checkout's root would be). Never throws.
std::string shipped_data_dir();

}  // namespace ranksim::app
