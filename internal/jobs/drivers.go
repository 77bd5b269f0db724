package jobs

// The buckets and keepers jobs work with without a cloud SDK: file://
// buckets and base64key:// keepers. The cloud drivers (s3://, gs://,
// azblob://, awskms://, ...) are registered by the binaries, which import
// internal/drivers, so this package and its tests do not link them.
import (
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/secrets/localsecrets"
)
