//! Images a script shows, made to fit what models take: at most
//! [`MAX_SIDE`] pixels on the long side (Anthropic's API scales anything larger
//! down itself, at the cost of upload and tokens; OpenAI's high detail tiles it).
//! A larger image is decoded, scaled down and encoded again; a smaller one goes
//! as it is, byte for byte.
//!
//! The image is a script's file, so it is read as hostile: its dimensions come
//! from its header first, and one past [`MAX_DECODE_PIXELS`] is refused before
//! anything is decoded (a few kilobytes of PNG can claim a billion pixels); the
//! decoder then runs under the same caps and an allocation limit, so a header
//! that lies fails as an error too.

/// The long side of an image as a model is shown it, at most: 1,568 pixels
/// (what Anthropic's API keeps without scaling).
pub const MAX_SIDE: u32 = 1568;
/// Pixels of an image the host decodes at most: 24 million (a 6,000 × 4,000
/// photo), about 96 MB as RGBA.
#[cfg(feature = "images")]
pub const MAX_DECODE_PIXELS: u64 = 24_000_000;

/// An image as the model gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fitted {
    /// Its bytes: the file's own when it fit, else the scaled image's.
    pub data: Vec<u8>,
    /// The media type of `data`.
    pub media_type: &'static str,
    /// Its size as sent, when the header could be read: `(width, height)`.
    pub size: Option<(u32, u32)>,
    /// The file's own size, when it was scaled down.
    pub scaled_from: Option<(u32, u32)>,
}

/// `data` (of `media_type`, already checked by its magic bytes) made to fit
/// [`MAX_SIDE`]; an error, in words for the model, when it cannot be read or is
/// too large to decode.
#[cfg(feature = "images")]
pub(crate) fn fit_for_model(data: Vec<u8>, media_type: &'static str) -> Result<Fitted, String> {
    use std::io::Cursor;

    use image::{ImageFormat, ImageReader, Limits, imageops::FilterType};

    let format = match media_type {
        "image/png" => ImageFormat::Png,
        "image/jpeg" => ImageFormat::Jpeg,
        "image/gif" => ImageFormat::Gif,
        "image/webp" => ImageFormat::WebP,
        other => return Err(format!("{other} images are not shown")),
    };
    let reader = || ImageReader::with_format(Cursor::new(&data), format);
    let (width, height) = reader()
        .into_dimensions()
        .map_err(|e| format!("the image cannot be read: {e}"))?;
    if u64::from(width) * u64::from(height) > MAX_DECODE_PIXELS {
        return Err(format!(
            "the image is {width} × {height} pixels; at most {} million pixels are shown",
            MAX_DECODE_PIXELS / 1_000_000
        ));
    }
    if width.max(height) <= MAX_SIDE {
        return Ok(Fitted {
            data,
            media_type,
            size: Some((width, height)),
            scaled_from: None,
        });
    }
    let mut limits = Limits::default();
    limits.max_image_width = Some(width);
    limits.max_image_height = Some(height);
    // RGBA with 16 bits a channel, and room for the decoder's own buffers.
    limits.max_alloc = Some(MAX_DECODE_PIXELS * 8 + (16 << 20));
    let mut decoder = reader();
    decoder.limits(limits);
    let image = decoder
        .decode()
        .map_err(|e| format!("the image cannot be decoded: {e}"))?;
    let scaled = image.resize(MAX_SIDE, MAX_SIDE, FilterType::Triangle);
    let mut out = Cursor::new(Vec::new());
    // A photograph stays a JPEG (smaller); anything else becomes a PNG, which
    // keeps transparency and sharp edges (the first frame of an animation).
    let (written, media_type) = if format == ImageFormat::Jpeg {
        let rgb = image::DynamicImage::ImageRgb8(scaled.to_rgb8());
        (rgb.write_to(&mut out, ImageFormat::Jpeg), "image/jpeg")
    } else {
        (scaled.write_to(&mut out, ImageFormat::Png), "image/png")
    };
    written.map_err(|e| format!("the scaled image cannot be encoded: {e}"))?;
    Ok(Fitted {
        data: out.into_inner(),
        media_type,
        size: Some((scaled.width(), scaled.height())),
        scaled_from: Some((width, height)),
    })
}

/// Without the `images` feature, images go as they are (the size cap still
/// holds).
#[cfg(not(feature = "images"))]
pub(crate) fn fit_for_model(data: Vec<u8>, media_type: &'static str) -> Result<Fitted, String> {
    Ok(Fitted {
        data,
        media_type,
        size: None,
        scaled_from: None,
    })
}

#[cfg(all(test, feature = "images"))]
mod tests {
    use std::io::Cursor;

    use image::{ImageFormat, RgbaImage};

    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        RgbaImage::from_pixel(width, height, image::Rgba([200, 30, 30, 255]))
            .write_to(&mut out, ImageFormat::Png)
            .expect("encodes");
        out.into_inner()
    }

    /// A valid PNG whose header claims `width` × `height`: the checksum of the
    /// header chunk is made right, so only the pixels are missing.
    fn png_claiming(width: u32, height: u32) -> Vec<u8> {
        let mut data = png(1, 1);
        // Signature (8), length (4), "IHDR" (4), then width and height.
        data[16..20].copy_from_slice(&width.to_be_bytes());
        data[20..24].copy_from_slice(&height.to_be_bytes());
        let crc = crc32(&data[12..29]);
        data[29..33].copy_from_slice(&crc.to_be_bytes());
        data
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn an_image_that_fits_goes_byte_for_byte() {
        let data = png(800, 600);
        let fitted = fit_for_model(data.clone(), "image/png").expect("fits");
        assert_eq!(fitted.data, data);
        assert_eq!((fitted.size, fitted.scaled_from), (Some((800, 600)), None));
    }

    #[test]
    fn a_large_image_is_scaled_to_the_long_side_keeping_its_shape() {
        let fitted = fit_for_model(png(3000, 2000), "image/png").expect("fits");
        assert_eq!(fitted.size, Some((1568, 1045)));
        assert_eq!(fitted.scaled_from, Some((3000, 2000)));
        assert_eq!(fitted.media_type, "image/png");
        let again = image::load_from_memory(&fitted.data).expect("a valid PNG");
        assert_eq!((again.width(), again.height()), (1568, 1045));
    }

    #[test]
    fn a_large_photograph_stays_a_jpeg() {
        let mut out = Cursor::new(Vec::new());
        image::RgbImage::from_pixel(2400, 1600, image::Rgb([10, 120, 200]))
            .write_to(&mut out, ImageFormat::Jpeg)
            .expect("encodes");
        let fitted = fit_for_model(out.into_inner(), "image/jpeg").expect("fits");
        assert_eq!(fitted.media_type, "image/jpeg");
        assert_eq!(fitted.size, Some((1568, 1045)));
    }

    /// If this fails, a few bytes of PNG make the host allocate gigabytes.
    #[test]
    fn a_header_claiming_a_billion_pixels_is_refused_before_decoding() {
        let bomb = png_claiming(40_000, 40_000);
        assert!(bomb.len() < 200, "{} bytes", bomb.len());
        let error = fit_for_model(bomb, "image/png").expect_err("refused");
        assert_eq!(
            error,
            "the image is 40000 × 40000 pixels; at most 24 million pixels are shown"
        );
    }

    /// A header within the cap whose pixels are missing: the decoder's error, not
    /// a panic or a huge allocation.
    #[test]
    fn a_header_whose_pixels_are_missing_is_an_error() {
        let liar = png_claiming(4000, 4000);
        let error = fit_for_model(liar, "image/png").expect_err("refused");
        assert!(error.starts_with("the image cannot be decoded"), "{error}");
        let truncated = png(10, 10)[..20].to_vec();
        let error = fit_for_model(truncated, "image/png").expect_err("refused");
        assert!(error.starts_with("the image cannot be read"), "{error}");
    }
}
