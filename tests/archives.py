"""Small archives built in memory for the data-preparation tests (packs and .deb files)."""
import io
import tarfile


def tar_bytes(members, mode="w"):
    """A tar archive of members ({name: bytes}) as bytes; mode 'w:xz' compresses it as tarfile does."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
