//! Protobuf's wire format, as far as ONNX uses it: a message read as its fields, each with the absolute byte range
//! it lies at, so that a patch knows where a value is; and the varint a same-length patch writes back.

use std::ops::Range;

/// One field of a message: its number, its value, and where it lies (tag included) in the buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub(crate) number: u32,
    pub(crate) value: Value,
    pub(crate) span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// The decoded varint and the range of its bytes.
    Varint(u64, Range<usize>),
    Fixed64(Range<usize>),
    Fixed32(Range<usize>),
    /// The payload of a length-delimited field (a string, bytes, a sub-message or a packed repeated field).
    Len(Range<usize>),
}

/// Reads a varint at `*at`, advancing it.
pub(crate) fn varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or_else(|| format!("varint runs past the end at byte {at}"))?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(format!("varint longer than 10 bytes ending at byte {at}"))
}

/// The fields of the message that fills `buf[range]`, in order, with absolute positions.
pub(crate) fn fields(buf: &[u8], range: Range<usize>) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let start = at;
        let tag = varint(buf, &mut at)?;
        let number = u32::try_from(tag >> 3).map_err(|_| format!("field number {} at byte {start} is out of range", tag >> 3))?;
        let fixed = |at: &mut usize, n: usize| -> Result<Range<usize>, String> {
            let r = *at..*at + n;
            *at += n;
            if r.end > range.end { Err(format!("field {number} at byte {start} runs past its message")) } else { Ok(r) }
        };
        let value = match tag & 7 {
            0 => {
                let s = at;
                let v = varint(buf, &mut at)?;
                Value::Varint(v, s..at)
            }
            1 => Value::Fixed64(fixed(&mut at, 8)?),
            2 => {
                let n = usize::try_from(varint(buf, &mut at)?).map_err(|_| format!("length of field {number} at byte {start}"))?;
                Value::Len(fixed(&mut at, n)?)
            }
            5 => Value::Fixed32(fixed(&mut at, 4)?),
            w => return Err(format!("field {number} at byte {start} has wire type {w}, which ONNX does not use")),
        };
        out.push(Field { number, value, span: start..at });
    }
    Ok(out)
}

pub(crate) fn text(buf: &[u8], f: &Field) -> Result<String, String> {
    match &f.value {
        Value::Len(r) => {
            String::from_utf8(buf[r.clone()].to_vec()).map_err(|_| format!("field {} at byte {} is not UTF-8", f.number, f.span.start))
        }
        _ => Err(format!("field {} at byte {} should be a string", f.number, f.span.start)),
    }
}

pub(crate) fn sub(f: &Field) -> Result<Range<usize>, String> {
    match &f.value {
        Value::Len(r) => Ok(r.clone()),
        _ => Err(format!("field {} at byte {} should be a message", f.number, f.span.start)),
    }
}

pub(crate) fn le4(buf: &[u8], r: &Range<usize>) -> [u8; 4] {
    let mut b = [0; 4];
    b.copy_from_slice(&buf[r.start..r.start + 4]);
    b
}

pub fn encode_varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u64::MAX] {
            let b = encode_varint(v);
            let mut at = 0;
            assert_eq!((varint(&b, &mut at).unwrap(), at), (v, b.len()));
        }
        assert!(varint(&[0x80, 0x80], &mut 0).is_err(), "truncated");
        assert!(varint(&[0xff; 11], &mut 0).is_err(), "too long");
    }
}
