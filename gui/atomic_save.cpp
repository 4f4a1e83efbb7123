#include "gui/atomic_save.h"

#include <exception>

#include <QBuffer>

#include "sim/base/file_io.h"

namespace pipescope::gui {

std::optional<QString> save_bytes_atomically(const QByteArray& bytes, const QString& path) {
  try {
    write_file_atomically(path.toStdString(), [&](std::ostream& out) {
      out.write(bytes.constData(), static_cast<std::streamsize>(bytes.size()));
    });
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return std::nullopt;
}

std::optional<QString> save_png_atomically(const QImage& image, const QString& path) {
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (image.isNull() || !image.save(&buffer, "PNG")) {
    return QStringLiteral("%1: cannot encode the picture as PNG").arg(path);
  }
  return save_bytes_atomically(bytes, path);
}

}  // namespace pipescope::gui
