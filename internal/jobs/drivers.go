package jobs

// The storage and key services a --job-bucket or --job-key-keeper URL may
// name: each driver registers its URL scheme with gocloud.dev when
// imported (file://, s3://, gs://, azblob://; base64key://, awskms://,
// gcpkms://, azurekeyvault://).
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
	_ "gocloud.dev/secrets/awskms"
	_ "gocloud.dev/secrets/azurekeyvault"
	_ "gocloud.dev/secrets/gcpkms"
	_ "gocloud.dev/secrets/localsecrets"
)
