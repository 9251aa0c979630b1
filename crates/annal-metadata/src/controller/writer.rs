//! An in-memory [`MetadataWriter`]: a committed batch is applied to the image at once. It is the same apply path
//! the quorum's state machine uses (`MetadataImage::try_apply` on every record), with no replication: what a
//! single node, the tests and a simulator need.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{BoxFuture, MetadataWriter, WriteError};
use crate::image::MetadataImage;
use crate::records::MetadataRecord;

pub struct InMemoryWriter {
    inner: Mutex<Inner>,
}

struct Inner {
    image: Arc<MetadataImage>,
    /// Every committed batch, by offset (the in-memory metadata log).
    log: Vec<(u64, Vec<MetadataRecord>)>,
    next_offset: u64,
}

impl InMemoryWriter {
    pub fn new(image: MetadataImage) -> Self {
        let next_offset = image.last_applied_offset.map_or(0, |o| o + 1);
        InMemoryWriter {
            inner: Mutex::new(Inner {
                image: Arc::new(image),
                log: Vec::new(),
                next_offset,
            }),
        }
    }

    /// The committed batches, oldest first.
    pub fn log(&self) -> Vec<(u64, Vec<MetadataRecord>)> {
        self.inner.lock().log.clone()
    }
}

impl MetadataWriter for InMemoryWriter {
    fn write(&self, records: Vec<MetadataRecord>) -> BoxFuture<'_, Result<u64, WriteError>> {
        Box::pin(async move {
            let mut inner = self.inner.lock();
            let offset = inner.next_offset;
            // The batch is atomic: apply to a copy and publish it only if every record fits.
            let mut image = (*inner.image).clone();
            image.try_apply_batch(offset, &records)?;
            inner.image = Arc::new(image);
            inner.log.push((offset, records));
            inner.next_offset = offset + 1;
            Ok(offset)
        })
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.inner.lock().image.clone()
    }
}
