//! AlterClientQuotas (49): Kafka's `ClientQuotaControlManager.alterClientQuotas`. Each entity is validated
//! (types user, client-id, ip; no duplicates; ip alone), each set key against the keys its kind of entity takes
//! (`crate::quota`), and becomes one ClientQuotaRecord per key whose value changes (a removal of a key the entity
//! does not hold writes nothing). An entity that fails writes nothing; the others still apply. The whole request
//! is one atomic batch; `validate_only` answers the same without writing.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::*;
use super::Controller;
use crate::quota::{entity_error, value_error, QuotaEntity, ENTITIES_PER_REQUEST_MAX};
use crate::records::{ClientQuotaRecord, MetadataRecord, QuotaEntityPart};

impl Controller {
    /// AlterClientQuotas (49).
    pub async fn alter_client_quotas(
        &self,
        req: AlterClientQuotasRequest,
    ) -> AlterClientQuotasResponse {
        let _state = self.lock_state().await;
        let image = self.writer.image();
        let mut results: Vec<Option<String>> = Vec::with_capacity(req.entries.len());
        let mut records: Vec<MetadataRecord> = Vec::new();
        let mut seen: Vec<QuotaEntity> = Vec::new();
        for (i, entry) in req.entries.iter().enumerate() {
            if i >= ENTITIES_PER_REQUEST_MAX {
                results.push(Some(format!(
                    "at most {ENTITIES_PER_REQUEST_MAX} entities may be altered in one request"
                )));
                continue;
            }
            let parts: Vec<(String, Option<String>)> = entry
                .entity
                .iter()
                .map(|e| {
                    (
                        e.entity_type.to_string(),
                        e.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect();
            if let Some(why) = entity_error(&parts) {
                results.push(Some(why));
                continue;
            }
            let entity: QuotaEntity = parts.into_iter().collect();
            if seen.contains(&entity) {
                results.push(Some(format!("Ignoring duplicate entity {entity:?}")));
                continue;
            }
            seen.push(entity.clone());
            // Kafka refuses a key altered twice for the entity, before anything else.
            let mut ops: BTreeMap<String, Option<f64>> = BTreeMap::new();
            let mut duplicate = None;
            for op in &entry.ops {
                let key = op.key.to_string();
                if ops.contains_key(&key) {
                    duplicate = Some(key);
                    break;
                }
                ops.insert(key, (!op.remove).then_some(op.value));
            }
            if let Some(key) = duplicate {
                results.push(Some(format!(
                    "Duplicate quota key {key} not updating quota for this entity {entity:?}"
                )));
                continue;
            }
            match entity_records(&image, &entity, &ops) {
                Ok(mut more) => {
                    records.append(&mut more);
                    results.push(None);
                }
                Err(why) => results.push(Some(why)),
            }
        }
        let write_error = if records.is_empty() || req.validate_only {
            None
        } else {
            self.writer.write(records).await.err()
        };
        drop(_state);
        let entries = req
            .entries
            .iter()
            .zip(results)
            .map(|(entry, result)| {
                let (code, message) = match (result, &write_error) {
                    (Some(why), _) => (INVALID_REQUEST, Some(why)),
                    (None, Some(e)) => (e.code(), Some(e.to_string())),
                    (None, None) => (NONE, None),
                };
                EntryData::default()
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
                    .with_entity(
                        entry
                            .entity
                            .iter()
                            .map(|e| {
                                EntityData::default()
                                    .with_entity_type(e.entity_type.clone())
                                    .with_entity_name(e.entity_name.clone())
                            })
                            .collect(),
                    )
            })
            .collect();
        AlterClientQuotasResponse::default().with_entries(entries)
    }
}

/// The records that bring `entity` to `ops` (key -> new value, `None` to remove), or why it cannot be.
fn entity_records(
    image: &crate::image::MetadataImage,
    entity: &QuotaEntity,
    ops: &BTreeMap<String, Option<f64>>,
) -> Result<Vec<MetadataRecord>, String> {
    let parts = || -> Vec<QuotaEntityPart> {
        entity
            .iter()
            .map(|(t, n)| QuotaEntityPart {
                entity_type: t.clone(),
                entity_name: n.clone(),
            })
            .collect()
    };
    let mut out = Vec::new();
    for (key, value) in ops {
        let current = image.client_quota(entity, key);
        match value {
            None => {
                if current.is_some() {
                    out.push(MetadataRecord::ClientQuota(ClientQuotaRecord {
                        entity: parts(),
                        key: key.clone(),
                        value: 0.0,
                        remove: true,
                    }));
                }
            }
            Some(v) => {
                if let Some(why) = value_error(entity, key, *v) {
                    return Err(why);
                }
                if current.map(f64::to_bits) != Some(v.to_bits()) {
                    out.push(MetadataRecord::ClientQuota(ClientQuotaRecord {
                        entity: parts(),
                        key: key.clone(),
                        value: *v,
                        remove: false,
                    }));
                }
            }
        }
    }
    Ok(out)
}
