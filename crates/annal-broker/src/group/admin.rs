//! DescribeGroups, ListGroups, DeleteGroups and FindCoordinator.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::classic::{s, GroupState, State};
use super::store::Record;
use super::{code, records, NodeInfo};

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;

impl State {
    /// Every live group, sorted by id: state, members and committed offsets.
    pub fn overview(&self) -> Vec<super::GroupOverview> {
        self.overview_where(|_| true, |_| true, false)
    }

    /// [`State::overview`] of the live groups `group` accepts, each with its committed offsets on the topics
    /// `topic` accepts; `with_offsets_only`: a group left with none is left out. A page of the console pays
    /// for its own groups (or topics), not for a copy of every group's offsets.
    pub fn overview_where(
        &self,
        group: impl Fn(&str) -> bool,
        topic: impl Fn(&str) -> bool,
        with_offsets_only: bool,
    ) -> Vec<super::GroupOverview> {
        let mut out: Vec<super::GroupOverview> = self
            .groups
            .values()
            .filter(|g| g.state != GroupState::Dead && group(&g.id))
            .filter_map(|g| {
                let offsets = self.committed_offsets_where(&g.id, &topic);
                if with_offsets_only && offsets.is_empty() {
                    return None;
                }
                let (state, kind, members) = match &g.consumer {
                    Some(c) => (c.state_name(), "consumer", c.members.len()),
                    None => (g.state.name(), "classic", g.members.len()),
                };
                Some(super::GroupOverview {
                    group: g.id.clone(),
                    state,
                    kind,
                    members,
                    offsets,
                })
            })
            .collect();
        out.sort_by(|a, b| a.group.cmp(&b.group));
        out
    }

    pub fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let mut resp = DescribeGroupsResponse::default();
        for id in req.groups {
            let mut d = DescribedGroup::default().with_group_id(id.clone());
            match self
                .groups
                .get(id.0.as_str())
                .filter(|g| g.state != GroupState::Dead && g.consumer.is_none())
            {
                None => {
                    // Kafka answers an unknown group as a Dead one; v6 (KIP-1043) adds GROUP_ID_NOT_FOUND.
                    d.group_state = StrBytes::from_static_str("Dead");
                    if version >= 6 {
                        d.error_code = code::GROUP_ID_NOT_FOUND;
                        d.error_message = Some(s(&format!("Group {} not found.", id.0.as_str())));
                    }
                }
                Some(g) => {
                    d.group_state = StrBytes::from_static_str(g.state.name());
                    d.protocol_type = s(g.protocol_type.as_deref().unwrap_or(""));
                    // Metadata and assignments only for a Stable group, as Kafka.
                    let stable = g.state == GroupState::Stable;
                    let protocol = g.protocol_name.as_deref().filter(|_| stable);
                    d.protocol_data = s(protocol.unwrap_or(""));
                    d.members = g
                        .members
                        .values()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(s(&m.id))
                                .with_group_instance_id(if version >= 4 {
                                    m.instance_id.as_deref().map(s)
                                } else {
                                    None
                                })
                                .with_client_id(s(&m.client_id))
                                .with_client_host(s(&m.client_host))
                                .with_member_metadata(if stable {
                                    m.metadata(protocol)
                                } else {
                                    Default::default()
                                })
                                .with_member_assignment(if stable {
                                    m.assignment.clone()
                                } else {
                                    Default::default()
                                })
                        })
                        .collect();
                }
            }
            resp.groups.push(d);
        }
        resp
    }

    pub fn list_groups(&self, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
        let states: Vec<String> = if version >= 4 {
            req.states_filter.iter().map(|s| s.to_lowercase()).collect()
        } else {
            Vec::new()
        };
        let types: Vec<String> = if version >= 5 {
            req.types_filter.iter().map(|s| s.to_lowercase()).collect()
        } else {
            Vec::new()
        };
        let mut groups: Vec<ListedGroup> = self
            .groups
            .values()
            .filter(|g| g.state != GroupState::Dead)
            .map(|g| {
                let (state, kind) = match &g.consumer {
                    Some(c) => (c.state_name(), "consumer"),
                    None => (g.state.name(), "classic"),
                };
                (g, state, kind)
            })
            .filter(|(_, state, _)| states.is_empty() || states.contains(&state.to_lowercase()))
            .filter(|(_, _, kind)| types.is_empty() || types.iter().any(|t| t == kind))
            .map(|(g, state, kind)| {
                ListedGroup::default()
                    .with_group_id(s(&g.id).into())
                    .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or("")))
                    .with_group_state(StrBytes::from_static_str(state))
                    .with_group_type(StrBytes::from_static_str(kind))
            })
            .collect();
        groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
        ListGroupsResponse::default().with_groups(groups)
    }

    pub fn delete_groups(&mut self, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
        let mut resp = DeleteGroupsResponse::default();
        for id in req.groups_names {
            let name = id.0.to_string();
            let error = match self.groups.get(&name) {
                _ if name.is_empty() => code::INVALID_GROUP_ID,
                None => code::GROUP_ID_NOT_FOUND,
                Some(g) if g.state == GroupState::Dead => code::GROUP_ID_NOT_FOUND,
                Some(g) if g.state != GroupState::Empty || g.has_members() => code::NON_EMPTY_GROUP,
                Some(g) => {
                    let mut tombstones: Vec<Record> = g
                        .offsets
                        .keys()
                        .map(|(t, p)| Record {
                            key: records::offset_key(&name, t, *p),
                            value: None,
                        })
                        .collect();
                    tombstones.push(Record {
                        key: records::group_key(&name),
                        value: None,
                    });
                    tombstones.extend(g.persisted_consumer.keys().map(|k| Record {
                        key: k.clone(),
                        value: None,
                    }));
                    if self.writer.append(g.partition, &tombstones) {
                        self.groups.remove(&name);
                        code::NONE
                    } else {
                        code::COORDINATOR_NOT_AVAILABLE
                    }
                }
            };
            resp.results.push(
                DeletableGroupResult::default()
                    .with_group_id(id)
                    .with_error_code(error),
            );
        }
        resp
    }
}

/// FindCoordinator: this node for every group key. v0-3 carry one key; v4+ a batch.
pub(super) fn find_coordinator(
    req: FindCoordinatorRequest,
    version: i16,
    node: &NodeInfo,
) -> FindCoordinatorResponse {
    let answer = |key_type: i8| -> (i16, Option<&'static str>) {
        if key_type == KEY_TYPE_GROUP {
            (code::NONE, None)
        } else {
            (
                code::COORDINATOR_NOT_AVAILABLE,
                Some("this broker has no coordinator for this key type"),
            )
        }
    };
    let key_type = if version >= 1 {
        req.key_type
    } else {
        KEY_TYPE_GROUP
    };
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        let (error, message) = answer(key_type);
        resp.coordinators = req
            .coordinator_keys
            .into_iter()
            .map(|key| {
                let c = Coordinator::default().with_key(key).with_error_code(error);
                if error == code::NONE {
                    c.with_node_id(node.node_id.into())
                        .with_host(s(&node.host))
                        .with_port(node.port)
                } else {
                    c.with_node_id((-1).into())
                        .with_port(-1)
                        .with_error_message(message.map(StrBytes::from_static_str))
                }
            })
            .collect();
    } else {
        let (error, message) = answer(key_type);
        resp.error_code = error;
        if error == code::NONE {
            resp.node_id = node.node_id.into();
            resp.host = s(&node.host);
            resp.port = node.port;
        } else {
            resp.node_id = (-1).into();
            resp.port = -1;
            if version >= 1 {
                resp.error_message = message.map(StrBytes::from_static_str);
            }
        }
    }
    resp
}
