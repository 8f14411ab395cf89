"""Object stores under :class:`~obsbus.loggers.remote_uploader_downloader.RemoteUploaderDownloader`.

One interface (:class:`ObjectStore`) over ``file://``, ``memory://``,
``s3://`` (and S3-compatible endpoints), ``gs://``, ``az://``/``abfs://``
and ``sftp://``; each backend's library is imported only when a store of
its scheme is built.
"""

from obsbus.object_store._uri import SUPPORTED_SCHEMES, BucketURI, mask_secrets, parse_bucket_uri
from obsbus.object_store.object_store import ObjectStore, build_object_store

__all__ = [
    "SUPPORTED_SCHEMES",
    "BucketURI",
    "ObjectStore",
    "build_object_store",
    "mask_secrets",
    "parse_bucket_uri",
]
