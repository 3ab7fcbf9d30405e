// The web page `pldr serve` serves at `/`: one static HTML document with inline JS and canvas/SVG
// (no build step, no external script).
#pragma once
#include <string>

namespace pldr::serve {
const std::string& page_html();
}
