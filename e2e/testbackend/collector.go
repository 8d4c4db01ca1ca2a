package testbackend

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// CollectorBuild is an OpenTelemetry Collector distribution a test runs,
// built from an ocb (OpenTelemetry Collector Builder) manifest once per
// content: the binary is cached under CacheDir, keyed by the builder's
// version, the manifest and every local Go source the distribution
// compiles, so a changed component rebuilds and an unchanged one starts at
// once. A cold build takes minutes, so it only happens when asked for:
//
//	$BinEnv=/path/to/otelcol       use this binary
//	LLMTRACE_BUILD_COLLECTOR=1     build it into the cache if missing (the
//	                               default when CI is set;
//	                               LLMTRACE_BUILD_COLLECTOR=0 opts out)
type CollectorBuild struct {
	Manifest       string // the ocb manifest
	BuilderVersion string // e.g. v0.161.0
	// RepoRoot and LocalPackages (import paths relative to the manifest's
	// directory) name the local components whose sources key the cache.
	RepoRoot      string
	LocalPackages []string
	BinEnv        string // e.g. LLMTRACE_OTELCOL_BIN
}

// EnvBuildCollector asks for collectors to be built when missing.
const EnvBuildCollector = "LLMTRACE_BUILD_COLLECTOR"

// Binary finds or builds the collector. skip is non-empty (and err nil)
// when there is no binary and building was not asked for.
func (c CollectorBuild) Binary() (bin, skip string, err error) {
	if c.BinEnv != "" {
		if p := os.Getenv(c.BinEnv); p != "" {
			if _, err := os.Stat(p); err != nil {
				return "", "", fmt.Errorf("%s: %w", c.BinEnv, err)
			}
			return p, "", nil
		}
	}
	b := os.Getenv(EnvBuildCollector)
	build := b == "1" || (b != "0" && os.Getenv(EnvCI) != "")
	bin, missing, err := buildCollector(c.Manifest, c.BuilderVersion, c.RepoRoot, c.LocalPackages, build, os.Stderr)
	if err != nil {
		return "", "", err
	}
	if missing {
		skip = fmt.Sprintf("no collector binary at %s; set %s=1 to build it with ocb %s (minutes, once)", bin, EnvBuildCollector, c.BuilderVersion)
		if c.BinEnv != "" {
			skip += " or " + c.BinEnv + "=/path/to/binary"
		}
		return "", skip, nil
	}
	return bin, "", nil
}

// buildCollector returns the collector built from manifest with ocb version
// builderVersion (e.g. v0.161.0), building it into the cache when missing
// and build is true. localPkgs are the import paths of the manifest's
// local components: the sources they compile (within repoRoot) are part of
// the cache key. It reports missing=true (and no error) when there is no
// binary and build is false.
func buildCollector(manifest, builderVersion, repoRoot string, localPkgs []string, build bool, log io.Writer) (bin string, missing bool, err error) {
	cfg, err := os.ReadFile(manifest)
	if err != nil {
		return "", false, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(cfg, &m); err != nil {
		return "", false, fmt.Errorf("ocb manifest %s: %w", manifest, err)
	}
	dist, _ := m["dist"].(map[string]any)
	name, _ := dist["name"].(string)
	if name == "" {
		return "", false, fmt.Errorf("ocb manifest %s has no dist.name", manifest)
	}
	key, err := cacheKey(cfg, builderVersion, filepath.Dir(manifest), repoRoot, localPkgs)
	if err != nil {
		return "", false, err
	}
	cache := CacheDir()
	if cache == "" {
		return "", false, fmt.Errorf("no cache directory ($HOME unset)")
	}
	dir := filepath.Join(cache, name+"-"+key)
	bin = filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, false, nil
	}
	if !build {
		return bin, true, nil
	}
	if err := writeManifest(m, manifest, dir); err != nil {
		return "", false, err
	}
	start := time.Now()
	cmd := exec.Command("go", "run", "go.opentelemetry.io/collector/cmd/builder@"+builderVersion, "--config="+filepath.Join(dir, "manifest.yaml"))
	// ocb resolves components' paths against its working directory.
	cmd.Dir = filepath.Dir(manifest)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", false, fmt.Errorf("ocb %s: %w\n%s", builderVersion, err, out)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", false, fmt.Errorf("ocb finished without %s: %w\n%s", bin, err, out)
	}
	if log != nil {
		fmt.Fprintf(log, "ocb %s built %s in %s\n", builderVersion, bin, time.Since(start).Round(time.Second))
	}
	return bin, false, nil
}

// writeManifest writes m with output_path at dir and relative replace
// targets made absolute. ocb copies a replace line into the go.mod it
// generates in output_path, so a relative target is relative to the
// manifest's output_path, not to the manifest; moving the output to dir
// has to keep it pointing at the same place.
func writeManifest(m map[string]any, manifest, dir string) error {
	dist := m["dist"].(map[string]any)
	out, _ := dist["output_path"].(string)
	base := filepath.Join(filepath.Dir(manifest), out)
	dist["output_path"] = dir
	if rs, ok := m["replaces"].([]any); ok {
		for i, r := range rs {
			s, _ := r.(string)
			from, to, ok := strings.Cut(s, "=>")
			to = strings.TrimSpace(to)
			if ok && (strings.HasPrefix(to, "./") || strings.HasPrefix(to, "../")) {
				abs, err := filepath.Abs(filepath.Join(base, to))
				if err != nil {
					return err
				}
				rs[i] = strings.TrimSpace(from) + " => " + abs
			}
		}
	}
	data, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.yaml"), data, 0o644)
}

// cacheKey hashes the builder version, the manifest and the non-test Go
// sources (and go.mod/go.sum) of every package under repoRoot that
// localPkgs compile.
func cacheKey(manifest []byte, builderVersion, modDir, repoRoot string, localPkgs []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", builderVersion, manifest)
	if len(localPkgs) > 0 {
		args := append([]string{"list", "-deps", "-f", "{{.Dir}}\t{{join .GoFiles \" \"}}"}, localPkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = modDir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go list %v: %w", localPkgs, err)
		}
		root, err := filepath.Abs(repoRoot)
		if err != nil {
			return "", err
		}
		var files []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			d, gofiles, _ := strings.Cut(line, "\t")
			if !strings.HasPrefix(d, root+string(filepath.Separator)) && d != root {
				continue
			}
			for _, f := range strings.Fields(gofiles) {
				files = append(files, filepath.Join(d, f))
			}
		}
		for _, d := range []string{root, modDir} {
			files = append(files, filepath.Join(d, "go.mod"), filepath.Join(d, "go.sum"))
		}
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil && !os.IsNotExist(err) {
				return "", err
			}
			rel, _ := filepath.Rel(root, f)
			fmt.Fprintf(h, "%s %d\n", rel, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:6]), nil
}
