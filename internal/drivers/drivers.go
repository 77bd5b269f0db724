// Package drivers links the cloud services a --job-bucket,
// --history-bucket or --job-key-keeper URL may name: importing it
// registers their URL schemes with gocloud.dev (s3://, gs://, azblob://;
// awskms://, gcpkms://, azurekeyvault://). Only the binaries import it:
// the packages below them, and their tests, work with file:// buckets and
// base64key:// keepers and do not link the cloud SDKs.
//
// It also does what only a bucket's own SDK can: AbortS3Uploads, which an
// erasure uses for the incomplete multipart uploads no object listing
// shows.
package drivers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
	_ "gocloud.dev/secrets/awskms"
	_ "gocloud.dev/secrets/azurekeyvault"
	_ "gocloud.dev/secrets/gcpkms"
)

// AbortS3Uploads aborts (or, for a dry run, counts) the incomplete
// multipart uploads directly under dir in S3 bucket bucketName: an export
// killed mid-upload leaves its parts there, ciphertext of the owner the
// erasure removes, which no object listing shows (issue 46, finding 7).
// A bucket that is not S3's has none: 0.
func AbortS3Uploads(ctx context.Context, bucket *blob.Bucket, bucketName, dir string, dryRun bool) (uint64, error) {
	var client *s3.Client
	if bucketName == "" || !bucket.As(&client) {
		return 0, nil
	}
	var n uint64
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(bucketName), Prefix: aws.String(dir), Delimiter: aws.String("/")}
	for {
		out, err := client.ListMultipartUploads(ctx, in)
		if err != nil {
			return n, fmt.Errorf("list the incomplete uploads: %w", err)
		}
		for _, u := range out.Uploads {
			if strings.Contains(strings.TrimPrefix(aws.ToString(u.Key), dir), "/") {
				continue
			}
			if !dryRun {
				_, err := client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucketName), Key: u.Key, UploadId: u.UploadId})
				var gone *s3types.NoSuchUpload
				if err != nil && !errors.As(err, &gone) {
					return n, fmt.Errorf("abort an incomplete upload: %w", err)
				}
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) {
			return n, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
