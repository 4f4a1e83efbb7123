#pragma once
// Pictures are encoded in memory and written like every other output
// (sim/file_io): to a temporary file renamed into place, so a failure leaves
// neither a half-written picture nor a stray temporary.

#include <optional>

#include <QByteArray>
#include <QImage>
#include <QString>

namespace pipescope::gui {

// Writes `bytes` to `path`; the error, naming the file, when it cannot.
std::optional<QString> save_bytes_atomically(const QByteArray& bytes, const QString& path);

// `image` as PNG at `path`.
std::optional<QString> save_png_atomically(const QImage& image, const QString& path);

}  // namespace pipescope::gui
