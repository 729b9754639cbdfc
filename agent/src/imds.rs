//! The instance metadata service (IMDS): the VM's name and private address, and Scheduled Events,
//! through which Azure announces a spot preemption (`Preempt`, at least 30 s ahead) or another
//! loss of the VM (`Terminate`).
//!
//! Reference: <https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events>. Every
//! request carries `Metadata: true`; the events document lists events for every VM of the
//! placement group, so the agent keeps only those whose `Resources` name its own VM.

use std::time::Duration;

use serde::Deserialize;

/// Api-version of Scheduled Events.
pub const SCHEDULED_EVENTS_API: &str = "2020-07-01";

/// Api-version of instance metadata.
pub const INSTANCE_API: &str = "2021-02-01";

/// Events that take the VM away: the work is told at once.
pub const EVICTING: &[&str] = &["Preempt", "Terminate"];

/// The events document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventsDocument {
    /// Changes whenever the events change.
    #[serde(default)]
    pub document_incarnation: u64,
    /// The events.
    #[serde(default)]
    pub events: Vec<ScheduledEvent>,
}

/// One scheduled event.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScheduledEvent {
    /// Its id.
    pub event_id: String,
    /// `Freeze`, `Reboot`, `Redeploy`, `Preempt`, `Terminate`.
    pub event_type: String,
    /// `VirtualMachine`.
    #[serde(default)]
    pub resource_type: String,
    /// The VMs it concerns.
    #[serde(default)]
    pub resources: Vec<String>,
    /// `Scheduled` or `Started`.
    #[serde(default)]
    pub event_status: String,
    /// When it may start (an HTTP date), empty once started.
    #[serde(default)]
    pub not_before: String,
}

/// A client of one IMDS endpoint.
#[derive(Debug, Clone)]
pub struct Imds {
    http: reqwest::Client,
    base: String,
}

impl Imds {
    /// A client of `endpoint` (`http://169.254.169.254` on Azure). IMDS answers locally within
    /// milliseconds; a short timeout keeps an agent off Azure from stalling.
    pub fn new(endpoint: &str) -> Imds {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .no_proxy()
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Imds { http, base: endpoint.trim_end_matches('/').to_string() }
    }

    async fn get(&self, path: &str) -> Result<String, String> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("Metadata", "true")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| e.to_string())?;
        if status.is_success() { Ok(text) } else { Err(format!("{status}: {text}")) }
    }

    /// The VM's name, as the cloud knows it.
    pub async fn vm_name(&self) -> Result<String, String> {
        let text = self.get(&format!("/metadata/instance/compute/name?api-version={INSTANCE_API}&format=text")).await?;
        let name = text.trim().to_string();
        if name.is_empty() { Err("empty name".into()) } else { Ok(name) }
    }

    /// The VM's first private IPv4 address.
    pub async fn private_ip(&self) -> Result<String, String> {
        let path = format!(
            "/metadata/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress?api-version={INSTANCE_API}&format=text"
        );
        let text = self.get(&path).await?;
        let ip = text.trim().to_string();
        ip.parse::<std::net::IpAddr>().map_err(|e| format!("{ip:?}: {e}"))?;
        Ok(ip)
    }

    /// The current events.
    pub async fn scheduled_events(&self) -> Result<EventsDocument, String> {
        let text = self.get(&format!("/metadata/scheduledevents?api-version={SCHEDULED_EVENTS_API}")).await?;
        serde_json::from_str(&text).map_err(|e| format!("unreadable events document: {e}"))
    }

    /// Approves an event so it may start before its `NotBefore` (the work has stopped).
    pub async fn approve(&self, event_id: &str) -> Result<(), String> {
        let body = serde_json::json!({"StartRequests": [{"EventId": event_id}]});
        let resp = self
            .http
            .post(format!("{}/metadata/scheduledevents?api-version={SCHEDULED_EVENTS_API}", self.base))
            .header("Metadata", "true")
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if resp.status().is_success() { Ok(()) } else { Err(resp.status().to_string()) }
    }
}

/// The first event that takes `vm` away, if any.
pub fn eviction_for<'d>(doc: &'d EventsDocument, vm: &str) -> Option<&'d ScheduledEvent> {
    doc.events
        .iter()
        .filter(|e| EVICTING.contains(&e.event_type.as_str()))
        .find(|e| e.resources.iter().any(|r| r.eq_ignore_ascii_case(vm)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_azures_document_and_keeps_only_this_vms_evictions() {
        let doc: EventsDocument = serde_json::from_str(
            r#"{"DocumentIncarnation": 3, "Events": [
                {"EventId": "A", "EventType": "Freeze", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
                 "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "",
                 "EventSource": "Platform", "DurationInSeconds": 5},
                {"EventId": "B", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm2"],
                 "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"},
                {"EventId": "C", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["VM1"],
                 "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(doc.document_incarnation, 3);
        assert_eq!(eviction_for(&doc, "vm1").unwrap().event_id, "C");
        assert_eq!(eviction_for(&doc, "vm2").unwrap().event_id, "B");
        assert!(eviction_for(&doc, "vm3").is_none());
    }
}
