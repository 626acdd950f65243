package testmodels

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// PNGClaiming is a PNG of a few dozen bytes whose header claims w×h 8-bit
// RGB pixels, with an empty image data chunk: what a decoder that trusts
// the header would allocate w×h×4 bytes for.
func PNGClaiming(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		crc.Write([]byte(typ))
		crc.Write(data)
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, crc.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB
	chunk("IHDR", ihdr)
	chunk("IDAT", nil)
	chunk("IEND", nil)
	return b.Bytes()
}
