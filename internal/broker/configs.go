package broker

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/storage"
	"holdfast/internal/topicconfig"
	"holdfast/internal/wire"
)

// describedConfig is one config entry before it is shaped for a response.
type describedConfig = kmsg.DescribeConfigsResponseResourceConfig

func strp(s string) *string { return &s }

func (b *Broker) handleDescribeConfigs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	synonyms := req.Version >= 1 && req.IncludeSynonyms
	docs := req.Version >= 3 && req.IncludeDocumentation
	for _, rr := range req.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		err := b.authorizeConfigs(r, rr.ResourceType, rr.ResourceName, auth.OpDescribeConfigs)
		switch {
		case err != nil:
		case rr.ResourceType == kmsg.ConfigResourceTypeTopic:
			var t metadata.Topic
			if t, err = b.lookupConfigTopic(rr.ResourceName); err == nil {
				res.Configs = b.describeTopicConfigs(t, rr.ConfigNames, synonyms, docs)
			}
		case rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig:
			if rr.ResourceName == "" {
				err = errCode(kerr.InvalidRequest, "a group config resource needs a group id")
			} else {
				res.Configs = b.describeGroupConfigs(rr.ResourceName, rr.ConfigNames, synonyms, docs)
			}
		case rr.ResourceType == kmsg.ConfigResourceTypeBroker:
			var cluster bool
			if cluster, err = b.checkBrokerResource(rr.ResourceName); err == nil {
				if cluster {
					// The cluster-wide default resource lists the dynamic
					// defaults only, as Kafka's does.
					res.Configs = b.describeClusterDefaults(rr.ConfigNames, synonyms, docs)
				} else {
					res.Configs = b.describeBrokerConfigs(rr.ConfigNames, synonyms, docs)
				}
			}
		default:
			err = errCode(kerr.InvalidRequest, "Unsupported resource type %s for DescribeConfigs", rr.ResourceType)
		}
		if err != nil {
			res.ErrorCode, res.ErrorMessage = kafkaError(err)
			res.Configs = nil
		}
		if req.Version == 0 {
			for i := range res.Configs {
				res.Configs[i].IsDefault = res.Configs[i].Source == kmsg.ConfigSourceDefaultConfig
			}
		}
		resp.Resources = append(resp.Resources, res)
	}
	return wire.Respond(resp)
}

func (b *Broker) lookupConfigTopic(name string) (metadata.Topic, error) {
	if err := metadata.ValidateTopicName(name); err != nil {
		return metadata.Topic{}, errCode(kerr.InvalidTopicException, "%v", err)
	}
	t, ok := b.meta.Topic(name)
	if !ok {
		return t, errCode(kerr.UnknownTopicOrPartition, "Topic '%s' does not exist.", name)
	}
	return t, nil
}

// checkBrokerResource accepts this node's id, or "" for the cluster-wide
// defaults (cluster is then true).
func (b *Broker) checkBrokerResource(name string) (cluster bool, err error) {
	if name == "" {
		return true, nil
	}
	id, perr := strconv.ParseInt(name, 10, 32)
	if perr != nil {
		return false, errCode(kerr.InvalidRequest, "Broker id must be an integer, but it is: %s", name)
	}
	if int32(id) != b.cfg.NodeID {
		return false, errCode(kerr.InvalidRequest, "Unexpected broker id, expected %d, but received %s", b.cfg.NodeID, name)
	}
	return false, nil
}

// describeTopicConfigs lists t's configs (only names, if non-nil), sorted
// by name, with Kafka's sources: DYNAMIC_TOPIC_CONFIG for an override,
// DYNAMIC_(DEFAULT_)BROKER_CONFIG for a dynamic default,
// STATIC_BROKER_CONFIG where the broker's default was set by its config
// file, a flag or the environment (Config.ConfigOrigins), DEFAULT_CONFIG
// otherwise.
func (b *Broker) describeTopicConfigs(t metadata.Topic, names []string, synonyms, docs bool) []describedConfig {
	var out []describedConfig
	for _, name := range topicconfig.Names() {
		if names != nil && !slices.Contains(names, name) {
			continue
		}
		spec, _ := topicconfig.Lookup(name)
		var chain []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
		addp := func(n string, v *string, src kmsg.ConfigSource) {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = n, v, src
			chain = append(chain, syn)
		}
		add := func(n, v string, src kmsg.ConfigSource) { addp(n, strp(v), src) }
		if v, ok := t.Configs[name]; ok {
			add(name, v, kmsg.ConfigSourceDynamicTopicConfig)
		}
		var bv string // the broker's static value
		var origin *ConfigOrigin
		if spec.BrokerName == "" { // no broker-level default (remote.storage.enable)
			add(name, spec.KafkaDefault, kmsg.ConfigSourceDefaultConfig)
		} else {
			b.addDynamicSynonyms(spec.BrokerName, add)
			bv = spec.BrokerValue(b.cfg.LogDefaults)
			if o, set := b.staticOrigin(spec.BrokerName); set {
				// Named and valued as the operator wrote it
				// (log.retention.hours=48), as Kafka does.
				origin = &o
				addp(o.Name, o.Value, kmsg.ConfigSourceStaticBrokerConfig)
				add(spec.BrokerName, spec.KafkaDefault, kmsg.ConfigSourceDefaultConfig)
			} else {
				add(spec.BrokerName, bv, kmsg.ConfigSourceDefaultConfig) // Holdfast's default
			}
		}

		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name = name
		c.Value = chain[0].Value
		c.Source = chain[0].Source
		if c.Source == kmsg.ConfigSourceStaticBrokerConfig {
			c.Value = strp(bv) // the synonym may hold it in other units
		}
		c.ConfigType = spec.Type
		if synonyms {
			c.ConfigSynonyms = chain
		}
		if docs {
			doc := spec.Doc
			if origin != nil && c.Source == kmsg.ConfigSourceStaticBrokerConfig {
				doc += " " + origin.String()
			}
			c.Documentation = strp(doc)
		}
		out = append(out, c)
	}
	return out
}

// brokerConfig is one broker config DescribeConfigs reports: set by flags
// and environment, and for the topic defaults also dynamically
// (IncrementalAlterConfigs on a BROKER resource, kept by the controller).
type brokerConfig struct {
	name, kafkaDefault string
	typ                kmsg.ConfigType
	doc                string
	value              func(b *Broker) *string // the static value
}

// addDynamicSynonyms adds the dynamic values of broker config name, this
// broker's own first, then the cluster-wide default, as Kafka orders them.
func (b *Broker) addDynamicSynonyms(name string, add func(n, v string, src kmsg.ConfigSource)) {
	if v, ok := b.meta.BrokerConfigs(strconv.Itoa(int(b.cfg.NodeID)))[name]; ok {
		add(name, v, kmsg.ConfigSourceDynamicBrokerConfig)
	}
	if v, ok := b.meta.BrokerConfigs("")[name]; ok {
		add(name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	}
}

// describeClusterDefaults lists the cluster-wide dynamic broker configs.
func (b *Broker) describeClusterDefaults(names []string, synonyms, docs bool) []describedConfig {
	dyn := b.meta.BrokerConfigs("")
	var out []describedConfig
	for _, name := range slices.Sorted(maps.Keys(dyn)) {
		if names != nil && !slices.Contains(names, name) {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.Source = name, strp(dyn[name]), kmsg.ConfigSourceDynamicDefaultBrokerConfig
		spec, ok := topicconfig.BrokerSpec(name)
		if ok {
			c.ConfigType = spec.Type
		}
		if synonyms {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = c.Name, c.Value, c.Source
			c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
		}
		if docs && ok {
			c.Documentation = strp("The default of the topic config " + spec.Name + ". " + spec.Doc)
		}
		out = append(out, c)
	}
	return out
}

func val(f func(b *Broker) string) func(*Broker) *string {
	return func(b *Broker) *string { return strp(f(b)) }
}

var brokerConfigs = []brokerConfig{
	{name: "node.id", typ: kmsg.ConfigTypeInt, kafkaDefault: "-1", doc: "This node's id.",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.NodeID)) })},
	{name: "broker.id", typ: kmsg.ConfigTypeInt, kafkaDefault: "-1", doc: "This node's id (the same as node.id).",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.NodeID)) })},
	{name: "log.dirs", typ: kmsg.ConfigTypeString, doc: "The data directory: partition logs and the node's metadata.",
		value: val(func(b *Broker) string { return b.cfg.DataDir })},
	{name: "advertised.listeners", typ: kmsg.ConfigTypeString, doc: "The address clients are told to connect to.",
		value: val(func(b *Broker) string {
			var out []string
			for _, e := range b.cfg.Security.Listeners {
				out = append(out, e.Name+"://"+net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))))
			}
			return strings.Join(out, ",")
		})},
	{name: "inter.broker.listener.name", typ: kmsg.ConfigTypeString, doc: "The listener nodes use to reach each other; node-to-node APIs are served only there.",
		value: val(func(b *Broker) string { return b.cfg.Security.InterBrokerListener })},
	{name: "listener.security.protocol.map", typ: kmsg.ConfigTypeString, doc: "Each listener's security protocol.",
		value: val(func(b *Broker) string {
			var out []string
			for _, e := range b.cfg.Security.Listeners {
				out = append(out, e.Name+":"+e.Protocol)
			}
			return strings.Join(out, ",")
		})},
	{name: "authorizer.class.name", typ: kmsg.ConfigTypeString, kafkaDefault: "", doc: "Set when ACLs are enforced.",
		value: func(b *Broker) *string {
			if b.cfg.Security.Authorizer == nil {
				return strp("")
			}
			return strp("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
		}},
	{name: "broker.rack", typ: kmsg.ConfigTypeString, doc: "The node's rack.",
		value: func(b *Broker) *string {
			if b.cfg.Rack == "" {
				return nil
			}
			return strp(b.cfg.Rack)
		}},
	{name: "auto.create.topics.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true", doc: "Whether Metadata requests create unknown topics (when the client allows it).",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.AutoCreateTopics) })},
	{name: "num.partitions", typ: kmsg.ConfigTypeInt, kafkaDefault: "1", doc: "Partitions of auto-created topics and of CreateTopics with -1.",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.NumPartitions)) })},
	{name: "default.replication.factor", typ: kmsg.ConfigTypeInt, kafkaDefault: "1", doc: "Replicas of new topics that do not say; 0 configured means min(3, brokers).",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cluster.DefaultReplicationFactor())) })},
	{name: "offsets.topic.num.partitions", typ: kmsg.ConfigTypeInt, kafkaDefault: "50", doc: "Partitions of __consumer_offsets.",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.OffsetsTopicPartitions)) })},
	{name: "delete.topic.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true", doc: "Topics can be deleted.",
		value: val(func(*Broker) string { return "true" })},
	{name: "log.retention.check.interval.ms", typ: kmsg.ConfigTypeLong, kafkaDefault: "300000", doc: "How often retention runs over every log.",
		value: val(func(b *Broker) string { return topicconfig.MsString(b.retentionInterval()) })},
	{name: "log.cleaner.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true", doc: "Whether the log cleaner compacts cleanup.policy=compact topics (the internal topics too).",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cleanerConfig().Enable) })},
	{name: "log.cleaner.threads", typ: kmsg.ConfigTypeInt, kafkaDefault: "1", doc: "Cleaner threads: partitions cleaned at once.",
		value: val(func(b *Broker) string { return strconv.Itoa(b.cleanerConfig().Threads) })},
	{name: "log.cleaner.dedupe.buffer.size", typ: kmsg.ConfigTypeLong, kafkaDefault: "134217728", doc: "Memory for the cleaner's offset maps, shared by its threads (24 bytes per key, 90% full at most); a dirty section with more keys is cleaned over several passes.",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cleanerConfig().DedupeBufferSize, 10) })},
	{name: "log.cleaner.io.buffer.size", typ: kmsg.ConfigTypeInt, kafkaDefault: "524288", doc: "The cleaner's read and write buffer per thread (grows to the largest batch).",
		value: val(func(b *Broker) string { return strconv.Itoa(b.cleanerConfig().IOBufferSize) })},
	{name: "log.cleaner.io.max.bytes.per.second", typ: kmsg.ConfigTypeDouble, kafkaDefault: "1.7976931348623157E308", doc: "The cleaner's read plus write rate, all threads together.",
		value: val(func(b *Broker) string {
			if r := b.cleanerConfig().IOMaxBytesPerSecond; r > 0 {
				return strconv.FormatFloat(r, 'g', -1, 64)
			}
			return "1.7976931348623157E308"
		})},
	{name: "log.cleaner.backoff.ms", typ: kmsg.ConfigTypeLong, kafkaDefault: "15000", doc: "How long an idle cleaner thread sleeps before it looks for dirty logs again.",
		value: val(func(b *Broker) string { return topicconfig.MsString(b.cleanerConfig().Backoff) })},
	{name: "offsets.topic.segment.bytes", typ: kmsg.ConfigTypeInt, kafkaDefault: "104857600", doc: "segment.bytes of __consumer_offsets when it is created.",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cfg.OffsetsTopicSegmentBytes, 10) })},
	{name: "transaction.state.log.segment.bytes", typ: kmsg.ConfigTypeInt, kafkaDefault: "104857600", doc: "segment.bytes of __transaction_state when it is created.",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cfg.TxnTopicSegmentBytes, 10) })},
}

// cleanerConfig is the cleaner's effective config.
func (b *Broker) cleanerConfig() CleanerConfig {
	if b.cfg.LogCleaner == (CleanerConfig{}) {
		return DefaultCleanerConfig()
	}
	return b.cfg.LogCleaner
}

// retentionInterval is log.retention.check.interval.ms with its default.
func (b *Broker) retentionInterval() time.Duration {
	if b.cfg.RetentionCheckInterval > 0 {
		return b.cfg.RetentionCheckInterval
	}
	return 5 * time.Minute
}

// describeBrokerConfigs lists the node's configs: the ones above plus the
// broker-level defaults of every topic config.
func (b *Broker) describeBrokerConfigs(names []string, synonyms, docs bool) []describedConfig {
	all := slices.Clone(brokerConfigs)
	seen := map[string]bool{}
	for _, c := range all {
		seen[c.name] = true
	}
	for _, name := range topicconfig.Names() {
		spec, _ := topicconfig.Lookup(name)
		if spec.BrokerName == "" || seen[spec.BrokerName] {
			continue
		}
		seen[spec.BrokerName] = true
		all = append(all, brokerConfig{name: spec.BrokerName, typ: spec.Type, kafkaDefault: spec.KafkaDefault,
			doc: "The default of the topic config " + spec.Name + ". " + spec.Doc, value: val(func(b *Broker) string { return spec.BrokerValue(b.cfg.LogDefaults) })})
	}
	all = append(all, brokerConfig{name: "holdfast.flush.policy", typ: kmsg.ConfigTypeString, kafkaDefault: "sync",
		doc:   "Holdfast's durability policy: sync (fsync with group commit before every acknowledgement), interval:<duration>, or os (page cache only, Kafka's behaviour).",
		value: val(func(b *Broker) string { return b.cfg.LogDefaults.Flush.String() })})
	all = append(all, brokerConfig{name: "log.scrub.bytes.per.second", typ: kmsg.ConfigTypeLong, kafkaDefault: strconv.Itoa(DefaultScrubBytesPerSecond),
		doc:   "Holdfast: how fast the background scrubber reads partition logs to check every batch's CRC (data not checked since this process opened it; a full pass again every hour); corrupt data makes the replica copy itself again from the others. 0: off (Kafka has no scrubber).",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cfg.LogScrubBytesPerSecond, 10) })})
	all = append(all, brokerConfig{name: "log.verify.reads", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true",
		doc:   "Holdfast: partition logs check the CRC of every byte they hand to a consumer or a follower that was not checked since this process opened it; a corrupt replica then steps down and is copied again from the others. false: Kafka's behaviour (the bytes go out unchecked; only the client's check sees corruption).",
		value: val(func(b *Broker) string { return strconv.FormatBool(!b.cfg.LogNoReadChecks) })})
	all = append(all, brokerConfig{name: "log.direct.io", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "false",
		doc:   "Holdfast: partition logs write each sync cycle's large write-outs (64 KiB of whole blocks or more) with O_DIRECT, past the page cache; smaller ones, and filesystems that refuse O_DIRECT (tmpfs), go through the page cache.",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.DirectIO) })})
	all = append(all, brokerConfig{name: "log.journal.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "false",
		doc:   "Holdfast: a node-wide data journal: each sync cycle makes the new bytes of every log whose bytes are all still buffered durable with one sequential write and one fdatasync of the journal; the segment files are written behind (docs/storage.md). Off by default.",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.LogJournal) })})
	all = append(all, brokerConfig{name: "raft.solo.path.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true",
		doc:   "Holdfast: a partition whose only replica is this node (an RF=1 topic, every partition of a single node) takes its batches without etcd raft's per-entry work: each is committed once its sync cycle made it durable (docs/replication.md). On by default.",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.RaftSoloPath) })})
	all = append(all, brokerConfig{name: "log.direct.io.cache.bytes", typ: kmsg.ConfigTypeLong, kafkaDefault: strconv.Itoa(storage.DefaultReadCacheBytes),
		doc: "Holdfast: with log.direct.io, memory (per process) for the newest segment bytes written, so that fetches of recent data are served from memory instead of the disk; 0: none.",
		value: val(func(b *Broker) string {
			switch n := b.cfg.DirectIOCacheBytes; {
			case n == 0:
				return strconv.Itoa(storage.DefaultReadCacheBytes)
			case n < 0:
				return "0"
			default:
				return strconv.FormatInt(n, 10)
			}
		})})
	slices.SortFunc(all, func(x, y brokerConfig) int { return strings.Compare(x.name, y.name) })

	var out []describedConfig
	for _, bc := range all {
		if names != nil && !slices.Contains(names, bc.name) {
			continue
		}
		// A topic default is alterable at run time (dynamic broker configs).
		_, dynamic := topicconfig.BrokerSpec(bc.name)
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name = bc.name
		c.ReadOnly = !dynamic
		c.ConfigType = bc.typ
		var chain []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
		add := func(n, v string, src kmsg.ConfigSource) {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = n, strp(v), src
			chain = append(chain, syn)
		}
		if dynamic {
			b.addDynamicSynonyms(bc.name, add)
		}
		static := bc.value(b)
		o, set := b.staticOrigin(bc.name)
		syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		syn.Name, syn.Value, syn.Source = c.Name, static, kmsg.ConfigSourceDefaultConfig
		if set {
			// Named and valued as the operator wrote it, as Kafka names
			// the synonym by the file's key.
			syn.Name, syn.Value, syn.Source = o.Name, o.Value, kmsg.ConfigSourceStaticBrokerConfig
		}
		chain = append(chain, syn)
		if set && bc.kafkaDefault != "" {
			def := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			def.Name, def.Value, def.Source = c.Name, strp(bc.kafkaDefault), kmsg.ConfigSourceDefaultConfig
			chain = append(chain, def)
		}
		c.Value, c.Source = chain[0].Value, chain[0].Source
		if c.Source == kmsg.ConfigSourceStaticBrokerConfig {
			c.Value = static
		}
		if synonyms {
			c.ConfigSynonyms = chain
		}
		if docs {
			doc := bc.doc
			if set && c.Source == kmsg.ConfigSourceStaticBrokerConfig {
				doc += " " + o.String()
			}
			c.Documentation = strp(doc)
		}
		out = append(out, c)
	}
	return out
}

// resourceKey identifies a config resource within one request.
type resourceKey struct {
	typ  kmsg.ConfigResourceType
	name string
}

func (b *Broker) handleAlterConfigs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	return alterReply(b, r, resp, req.Resources,
		func(rr kmsg.AlterConfigsRequestResource) resourceKey {
			return resourceKey{rr.ResourceType, rr.ResourceName}
		},
		func(rr kmsg.AlterConfigsRequestResource) error {
			return b.alterConfigs(rr, req.ValidateOnly, b.forwardedBy(r))
		},
		func(rr kmsg.AlterConfigsRequestResource, code int16, msg *string) {
			res := kmsg.NewAlterConfigsResponseResource()
			res.ResourceType, res.ResourceName, res.ErrorCode, res.ErrorMessage = rr.ResourceType, rr.ResourceName, code, msg
			resp.Resources = append(resp.Resources, res)
		},
		func(ctx context.Context, rs []kmsg.AlterConfigsRequestResource) ([]alterResult, error) {
			fwd := *req
			fwd.Resources = rs
			fresp, err := b.forwardConfigs(ctx, &fwd)
			if err != nil {
				return nil, err
			}
			var out []alterResult
			for _, res := range fresp.(*kmsg.AlterConfigsResponse).Resources {
				out = append(out, alterResult{res.ErrorCode, res.ErrorMessage})
			}
			return out, nil
		})
}

// alterResult is one resource's answer from the controller.
type alterResult struct {
	code int16
	msg  *string
}

// errStillHere: the controller role came to this node before the request
// was forwarded; it is handled here after all.
var errStillHere = errors.New("this node is the controller")

// forwardConfigs passes req on to the controller.
func (b *Broker) forwardConfigs(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	resp, forwarded, err := b.cluster.ForwardToController(ctx, req)
	switch {
	case !forwarded:
		return nil, errStillHere
	case err != nil:
		return nil, err
	}
	return resp, nil
}

// alterReply answers AlterConfigs and IncrementalAlterConfigs. Topic
// configs live in the metadata log and only the controller changes them;
// clients send these requests to any broker, so another node passes a
// request about topics on to the controller, as Kafka's brokers do
// (KIP-590), after authorizing it here: the controller trusts what a node
// forwards. Broker resources (static configs here) are answered by the
// node asked.
func alterReply[RR any](b *Broker, r *wire.Request, resp kmsg.Response, resources []RR, key func(RR) resourceKey,
	alter func(RR) error, answer func(RR, int16, *string), forward func(context.Context, []RR) ([]alterResult, error)) wire.Reply {
	local := func() kmsg.Response {
		alterEach(resources, key, func(rr RR) error {
			k := key(rr)
			if err := b.authorizeAlter(r, k.typ, k.name); err != nil {
				return err
			}
			return alter(rr)
		}, func(rr RR, err error) {
			code, msg := kafkaError(err)
			answer(rr, code, msg)
		})
		return resp
	}
	stored := len(resources) > 0
	for _, rr := range resources {
		switch key(rr).typ {
		case kmsg.ConfigResourceTypeTopic, kmsg.ConfigResourceTypeGroupConfig, kmsg.ConfigResourceTypeBroker:
		default:
			stored = false
		}
	}
	if !stored || b.cluster.IsController() || b.forwardedBy(r) {
		return wire.Respond(local())
	}
	denied := map[int]error{}
	var allowed []RR
	for i, rr := range resources {
		k := key(rr)
		err := b.authorizeAlter(r, k.typ, k.name)
		if err == nil && k.typ == kmsg.ConfigResourceTypeBroker {
			// A broker's own configs are altered through that broker (the
			// controller takes the forwarded change without this check).
			_, err = b.checkBrokerResource(k.name)
		}
		if err != nil {
			denied[i] = err
		} else {
			allowed = append(allowed, rr)
		}
	}
	return func(ctx context.Context) kmsg.Response {
		var results []alterResult
		var ferr error
		if len(allowed) > 0 {
			results, ferr = forward(ctx, allowed)
		}
		if errors.Is(ferr, errStillHere) {
			return local()
		}
		for i, rr := range resources {
			switch {
			case denied[i] != nil:
				code, msg := kafkaError(denied[i])
				answer(rr, code, msg)
			case ferr != nil:
				code, msg := kafkaError(ferr)
				answer(rr, code, msg)
			case len(results) == 0:
				answer(rr, kerr.UnknownServerError.Code, strp("the controller's answer is missing this resource"))
			default:
				answer(rr, results[0].code, results[0].msg)
				results = results[1:]
			}
		}
		return resp
	}
}

// authorizeAlter is ALTER_CONFIGS on a resource, except for what another
// node forwards: that node authorized its client.
func (b *Broker) authorizeAlter(r *wire.Request, typ kmsg.ConfigResourceType, name string) error {
	if b.forwardedBy(r) {
		return nil
	}
	return b.authorizeConfigs(r, typ, name, auth.OpAlterConfigs)
}

// alterEach runs alter for every resource of an AlterConfigs or
// IncrementalAlterConfigs request and reports each result in order; a
// resource named twice in one request is refused, as Kafka does, since
// which of the two should win is undefined.
func alterEach[R any](resources []R, key func(R) resourceKey, alter func(R) error, report func(R, error)) {
	dup := map[resourceKey]int{}
	for _, rr := range resources {
		dup[key(rr)]++
	}
	for _, rr := range resources {
		var err error
		if dup[key(rr)] > 1 {
			err = errCode(kerr.InvalidRequest, "Error due to duplicate resources in the request")
		} else {
			err = alter(rr)
		}
		report(rr, err)
	}
}

// alterConfigs replaces a resource's whole set of overrides (the legacy,
// non-incremental AlterConfigs: anything not listed reverts to default).
func (b *Broker) alterConfigs(rr kmsg.AlterConfigsRequestResource, validateOnly, forwarded bool) error {
	configs := map[string]string{}
	for _, c := range rr.Configs {
		if _, dup := configs[c.Name]; dup {
			return errCode(kerr.InvalidRequest, "Error due to duplicate config keys")
		}
		if c.Value == nil {
			return errCode(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
		}
		configs[c.Name] = *c.Value
	}
	switch rr.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
		if _, err := b.lookupConfigTopic(rr.ResourceName); err != nil {
			return err
		}
		return b.applyTopicConfigs(rr.ResourceName, configs, validateOnly)
	case kmsg.ConfigResourceTypeBroker:
		if !forwarded {
			if _, err := b.checkBrokerResource(rr.ResourceName); err != nil {
				return err
			}
		}
		return b.setBrokerConfigs(rr.ResourceName, configs, validateOnly)
	case kmsg.ConfigResourceTypeGroupConfig:
		return b.setGroupConfigs(rr.ResourceName, configs, validateOnly)
	}
	return errCode(kerr.InvalidRequest, "Unsupported resource type %s for AlterConfigs", rr.ResourceType)
}

// setBrokerConfigs validates configs as the whole set of dynamic broker
// configs of scope ("" the cluster-wide default, else a broker id) and,
// unless validateOnly, has the controller store it. Only the topic
// defaults (log.retention.ms, min.insync.replicas, ...) are dynamic; the
// rest are flags.
func (b *Broker) setBrokerConfigs(scope string, configs map[string]string, validateOnly bool) error {
	if err := topicconfig.ValidateBroker(configs); err != nil {
		return errCode(kerr.InvalidConfig, "%v", err)
	}
	if validateOnly {
		return nil
	}
	return b.cluster.SetBrokerConfigs(scope, configs)
}

// applyTopicConfigs validates configs as the topic's complete override set
// and, unless validateOnly, stores it and applies it to the open logs.
func (b *Broker) applyTopicConfigs(name string, configs map[string]string, validateOnly bool) error {
	if err := topicconfig.Validate(configs); err != nil {
		return errCode(kerr.InvalidConfig, "%v", err)
	}
	if err := b.checkRemoteStorage(configs); err != nil {
		return err
	}
	if t, ok := b.meta.Topic(name); ok {
		if err := checkRestoreUnchanged(t.Configs, configs); err != nil {
			return err
		}
	}
	if validateOnly {
		return nil
	}
	_, err := b.setTopicConfigs(name, configs)
	return err
}

func (b *Broker) handleIncrementalAlterConfigs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	return alterReply(b, r, resp, req.Resources,
		func(rr kmsg.IncrementalAlterConfigsRequestResource) resourceKey {
			return resourceKey{rr.ResourceType, rr.ResourceName}
		},
		func(rr kmsg.IncrementalAlterConfigsRequestResource) error {
			return b.incrementalAlterConfigs(rr, req.ValidateOnly, b.forwardedBy(r))
		},
		func(rr kmsg.IncrementalAlterConfigsRequestResource, code int16, msg *string) {
			res := kmsg.NewIncrementalAlterConfigsResponseResource()
			res.ResourceType, res.ResourceName, res.ErrorCode, res.ErrorMessage = rr.ResourceType, rr.ResourceName, code, msg
			resp.Resources = append(resp.Resources, res)
		},
		func(ctx context.Context, rs []kmsg.IncrementalAlterConfigsRequestResource) ([]alterResult, error) {
			fwd := *req
			fwd.Resources = rs
			fresp, err := b.forwardConfigs(ctx, &fwd)
			if err != nil {
				return nil, err
			}
			var out []alterResult
			for _, res := range fresp.(*kmsg.IncrementalAlterConfigsResponse).Resources {
				out = append(out, alterResult{res.ErrorCode, res.ErrorMessage})
			}
			return out, nil
		})
}

func (b *Broker) incrementalAlterConfigs(rr kmsg.IncrementalAlterConfigsRequestResource, validateOnly, forwarded bool) error {
	seen := map[string]bool{}
	for _, c := range rr.Configs {
		if seen[c.Name] {
			return errCode(kerr.InvalidRequest, "Error due to duplicate config keys")
		}
		seen[c.Name] = true
		if c.Op < kmsg.IncrementalAlterConfigOpSet || c.Op > kmsg.IncrementalAlterConfigOpSubtract {
			return errCode(kerr.InvalidRequest, "Unknown alter config operation %d for %s", int8(c.Op), c.Name)
		}
	}
	switch rr.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
	case kmsg.ConfigResourceTypeBroker:
		if !forwarded {
			if _, err := b.checkBrokerResource(rr.ResourceName); err != nil {
				return err
			}
		}
		return b.incrementalBrokerConfigs(rr, validateOnly)
	case kmsg.ConfigResourceTypeGroupConfig:
		return b.incrementalGroupConfigs(rr, validateOnly)
	default:
		return errCode(kerr.InvalidRequest, "Unsupported resource type %s for IncrementalAlterConfigs", rr.ResourceType)
	}

	// Read, modify and write under alterMu so concurrent incremental
	// changes to one topic do not lose each other's updates (only the
	// controller commits them).
	b.alterMu.Lock()
	defer b.alterMu.Unlock()
	t, err := b.lookupConfigTopic(rr.ResourceName)
	if err != nil {
		return err
	}
	for _, c := range rr.Configs {
		if _, known := topicconfig.Lookup(c.Name); c.Op != kmsg.IncrementalAlterConfigOpDelete && !known {
			return errCode(kerr.InvalidConfig, "Unknown topic config name: %s", c.Name)
		}
	}
	configs := maps.Clone(t.Configs)
	if err := editConfigs(configs, rr.Configs, func(name string) (string, bool) {
		spec, ok := topicconfig.Lookup(name)
		if !ok || spec.Type != kmsg.ConfigTypeList {
			return "", false
		}
		return spec.BrokerValue(b.cfg.LogDefaults), true
	}); err != nil {
		return err
	}
	if err := topicconfig.Validate(configs); err != nil {
		return errCode(kerr.InvalidConfig, "%v", err)
	}
	if err := b.checkRemoteStorage(configs); err != nil {
		return err
	}
	if err := checkRestoreUnchanged(t.Configs, configs); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	_, err = b.setTopicConfigs(t.Name, configs)
	return err
}

// incrementalBrokerConfigs edits the dynamic broker configs of one scope:
// read, modify and write under alterMu, as for a topic.
func (b *Broker) incrementalBrokerConfigs(rr kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	b.alterMu.Lock()
	defer b.alterMu.Unlock()
	configs := maps.Clone(b.meta.BrokerConfigs(rr.ResourceName))
	if configs == nil {
		configs = map[string]string{}
	}
	if err := editConfigs(configs, rr.Configs, func(name string) (string, bool) {
		spec, ok := topicconfig.BrokerSpec(name)
		if !ok || spec.Type != kmsg.ConfigTypeList {
			return "", false
		}
		return spec.BrokerValue(b.cfg.LogDefaults), true
	}); err != nil {
		return err
	}
	return b.setBrokerConfigs(rr.ResourceName, configs, validateOnly)
}

// editConfigs applies IncrementalAlterConfigs' operations to configs.
// list gives the value an APPEND or SUBTRACT of name starts from when
// configs has none, and false if name is not a list (nothing to append
// to).
func editConfigs(configs map[string]string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig, list func(name string) (string, bool)) error {
	for _, c := range ops {
		if c.Op != kmsg.IncrementalAlterConfigOpDelete && c.Value == nil {
			return errCode(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			configs[c.Name] = *c.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(configs, c.Name)
		default: // APPEND, SUBTRACT
			def, ok := list(c.Name)
			if !ok {
				return errCode(kerr.InvalidConfig, "Config value append is not allowed for config key: %s", c.Name)
			}
			cur, has := configs[c.Name]
			if !has {
				cur = def
			}
			configs[c.Name] = editList(cur, *c.Value, c.Op == kmsg.IncrementalAlterConfigOpAppend)
		}
	}
	return nil
}

// editList appends the items of delta missing from the comma-separated
// list cur, or subtracts them from it.
func editList(cur, delta string, add bool) string {
	items := topicconfig.SplitList(cur)
	for _, d := range topicconfig.SplitList(delta) {
		i := slices.Index(items, d)
		switch {
		case add && i < 0:
			items = append(items, d)
		case !add && i >= 0:
			items = slices.Delete(items, i, i+1)
		}
	}
	return strings.Join(items, ",")
}

// ConfigOrigin is where a static broker setting was set.
type ConfigOrigin struct {
	// Kind is OriginFile, OriginFlag or OriginEnv.
	Kind string
	// Name is what set it, as the operator wrote it: the file's key
	// (log.retention.hours), the flag (--retention, or --override
	// log.retention.hours) or the environment variable
	// (HOLDFAST_RETENTION). It is the name of the STATIC_BROKER_CONFIG
	// synonym, as Kafka names that synonym by the file's key.
	Name string
	// Value is the value as written there (not converted: 48 for
	// log.retention.hours); nil for a secret.
	Value *string
	// File is the config file's path (OriginFile).
	File string
}

// The kinds of ConfigOrigin.
const (
	OriginFile = "file"
	OriginFlag = "flag"
	OriginEnv  = "env"
)

// String says where the setting came from, for DescribeConfigs'
// documentation field.
func (o ConfigOrigin) String() string {
	switch o.Kind {
	case OriginFile:
		return "Set in the config file " + o.File + " (" + o.Name + ")."
	case OriginEnv:
		return "Set by the environment variable " + o.Name + "."
	}
	return "Set on the command line (" + o.Name + ")."
}

// staticOrigin is where broker config name was set statically, and
// whether it was.
func (b *Broker) staticOrigin(name string) (ConfigOrigin, bool) {
	o, set := b.cfg.ConfigOrigins[name]
	return o, set
}
