package archive

// goldenArchive is TestARCH001_GoldenVector's archive: key 32 × 0x01, base
// nonce 00 01 … 0b, a metadata element and one group.
const goldenArchive = "0000000102030405060708090a0b28b52ffd002811020020000000b1a8872421fc1ef97ec25627bf8e03b45079c88ae02e27eb811b492e1f5079141a000000034eb398e1f72ffe61e16a406eabaa05a76e2266b29d68aaf943"
