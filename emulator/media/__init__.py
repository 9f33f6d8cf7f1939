"""The media store: the databases' home buckets on a loopback S3 endpoint."""
